//! `TransactionOps` for [`Ascend`]: Burn's default reads each tensor after one stream
//! synchronisation per read; the first read waits for all queued work, the others find the
//! stream idle.

use super::*;

impl TransactionOps<Ascend> for Ascend {}
