//! `DistributedOps` for [`Ascend`]: Burn 0.22 requires it of every backend. Burn's defaults
//! (no communication server; `all_reduce` unimplemented): a served device belongs to one
//! client session, and HCCL collectives stay with the core's `Communicator`.

use crate::backend::Ascend;

impl burn_backend::distributed::DistributedOps<Ascend> for Ascend {}
