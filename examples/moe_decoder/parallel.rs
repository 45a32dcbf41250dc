//! `--devices N`: the NPUs the example uses, data-parallel training across them and
//! expert-parallel serving over them (one NPU: the single-device paths).

use burn::tensor::backend::AutodiffBackend;
use burn_ascend::runtime::device::device_count;
use burn_ascend::{AscendDevice, CollectiveOps, FusedOps};
use burn_ascend_llm::engine::serve::{Request, ServeConfig, Server};
use burn_ascend_llm::engine::workload::ServingReport;
use burn_ascend_llm::moe::data_parallel::train_data_parallel;
use burn_ascend_llm::moe::expert_parallel::ExpertParallel;
use burn_ascend_llm::moe::model::MoeDecoder;
use burn_ascend_llm::moe::train::{train as train_one, StepReport, TrainConfig};

use super::JSON;

/// `count` devices of `first`'s kind, from `first`'s index on.
pub fn devices(first: AscendDevice, count: usize) -> Result<Vec<AscendDevice>, String> {
    if count == 0 {
        return Err("--devices must be at least 1".into());
    }
    let available =
        device_count(&first.into()).map_err(|e| format!("cannot count devices: {e}"))?;
    if first.index() + count > available {
        return Err(format!(
            "--devices {count} from {first} needs {} devices, the machine has {available} (emulated NPUs: BURN_ASCEND_EMU_DEVICES)",
            first.index() + count
        ));
    }
    Ok((first.index()..first.index() + count)
        .map(|i| match first {
            AscendDevice::Npu(_) => AscendDevice::Npu(i),
            AscendDevice::Emulated(_) => AscendDevice::Emulated(i),
        })
        .collect())
}

/// Trains on one device, or data-parallel on several.
pub fn train<B>(
    model: MoeDecoder<B>,
    tokens: &[u32],
    cfg: &TrainConfig,
    devices: &[AscendDevice],
    report: impl FnMut(StepReport),
) -> Result<MoeDecoder<B>, String>
where
    B: AutodiffBackend<Device = AscendDevice> + FusedOps,
    B::InnerBackend: CollectiveOps,
{
    if devices.len() == 1 {
        return train_one(model, tokens, cfg, &devices[0], report).map_err(|e| e.to_string());
    }
    say!("data-parallel training on {}", names(devices));
    train_data_parallel(model, tokens, cfg, devices, report)
}

/// The model to serve: as it is on one device, its experts split across several.
pub fn serving<B: FusedOps + CollectiveOps>(
    model: MoeDecoder<B>,
    devices: &[AscendDevice],
) -> Result<MoeDecoder<B>, String> {
    if devices.len() == 1 {
        return Ok(model);
    }
    say!(
        "expert-parallel serving: experts split across {}",
        names(devices)
    );
    ExpertParallel::shard(model, devices).map_err(|e| e.to_string())
}

fn names(devices: &[AscendDevice]) -> String {
    devices
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// With several NPUs, serves the requests again on the first NPU alone and checks that it gives
/// the expert-parallel tokens (the same weights compute every row: a difference is a bug).
pub fn check_one_device<B: FusedOps<Device = AscendDevice>>(
    model: MoeDecoder<B>,
    serve: ServeConfig,
    devices: &[AscendDevice],
    requests: &[Request],
    expert_parallel: &ServingReport,
) -> Result<(), String> {
    if devices.len() == 1 {
        return Ok(());
    }
    let mut server = Server::new(model, serve, &devices[0]).map_err(|e| e.to_string())?;
    let one = server.generate(requests);
    let same = one
        .results
        .iter()
        .zip(&expert_parallel.results)
        .all(|(a, b)| match (a, b) {
            (Ok(a), Ok(b)) => a.tokens == b.tokens,
            _ => false,
        });
    if !same {
        return Err(format!(
            "expert-parallel serving across {} gave other tokens than {} alone",
            names(devices),
            devices[0]
        ));
    }
    say!(
        "the same weights on {} alone give the same tokens",
        devices[0]
    );
    Ok(())
}
