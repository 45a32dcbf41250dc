//! Hugging Face checkpoint files: safetensors (single and sharded + index) written by `hf::save`
//! and by the `safetensors` crate directly, read back by `hf::Checkpoint` bit for bit, with the
//! named errors for every kind of bad directory; the tokenizer wrapper on a byte-level BPE whose
//! ids are worked out by hand.

use std::path::{Path, PathBuf};

use burn::tensor::{DType, TensorData};
use burn_ascend_llm::hf::{save, Checkpoint, CheckpointError, Element, TextTokenizer};
use half::{bf16, f16};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::json;

/// f32 values covering signs, zeros, subnormals, infinities and many mantissa patterns.
fn f32_values(n: usize) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        1.0,
        -2.5,
        f32::MIN_POSITIVE / 8.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
    ];
    (0..n)
        .map(|i| {
            special
                .get(i)
                .copied()
                .unwrap_or_else(|| ((i as f32) * 0.731).sin() * 37.0)
        })
        .collect()
}

fn f16_values(n: usize) -> Vec<f16> {
    // Every 997th bit pattern: spans subnormals, normals, infinities and NaNs of both signs.
    (0..n).map(|i| f16::from_bits((i * 997) as u16)).collect()
}

fn bf16_values(n: usize) -> Vec<bf16> {
    (0..n).map(|i| bf16::from_bits((i * 1009) as u16)).collect()
}

fn tensors() -> Vec<(String, TensorData)> {
    vec![
        (
            "model.embed_tokens.weight".into(),
            TensorData::new(f32_values(24), [4, 6]),
        ),
        (
            "model.layers.0.self_attn.q_proj.weight".into(),
            TensorData::new(f16_values(30), [5, 6]),
        ),
        (
            "model.layers.0.mlp.experts.0.w1.weight".into(),
            TensorData::new(bf16_values(66), [11, 6]),
        ),
        (
            "model.norm.weight".into(),
            TensorData::new(f32_values(6), [6]),
        ),
        (
            "lm_head.weight".into(),
            TensorData::new(bf16_values(24), [4, 6]),
        ),
    ]
}

fn config() -> serde_json::Value {
    json!({ "architectures": ["MixtralForCausalLM"], "hidden_size": 6, "vocab_size": 4 })
}

fn expected_shapes(tensors: &[(String, TensorData)]) -> Vec<(String, Vec<usize>, Element)> {
    tensors
        .iter()
        .map(|(name, data)| (name.clone(), data.shape.to_vec(), Element::Float))
        .collect()
}

/// Every tensor reads back in its own dtype with the bytes it was saved with.
fn assert_bit_exact(checkpoint: &Checkpoint, tensors: &[(String, TensorData)]) {
    for (name, data) in tensors {
        let info = checkpoint.info(name).unwrap();
        assert_eq!(info.dtype, data.dtype, "{name}");
        assert_eq!(info.shape, data.shape.to_vec(), "{name}");
        let read = checkpoint.read(name, data.dtype).unwrap();
        assert_eq!(read.dtype, data.dtype, "{name}");
        assert_eq!(read.shape, data.shape, "{name}");
        assert_eq!(read.as_bytes(), data.as_bytes(), "{name}");
    }
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn single_file_round_trip_is_bit_exact_for_every_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let tensors = tensors();
    save(dir.path(), &config(), tensors.clone(), None, None).unwrap();
    assert_eq!(file_names(dir.path()), ["config.json", "model.safetensors"]);

    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.dir(), dir.path());
    assert_eq!(checkpoint.config(), &config());
    let mut names: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(checkpoint.names().collect::<Vec<_>>(), names);
    let file = dir.path().join("model.safetensors");
    assert!(names
        .iter()
        .all(|n| checkpoint.info(n).unwrap().file == file));
    assert_eq!(checkpoint.info("nope"), None);
    assert_bit_exact(&checkpoint, &tensors);
    checkpoint
        .check(&expected_shapes(&tensors), |_| false)
        .unwrap();
}

#[test]
fn half_precision_widens_to_f32_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // Reference values by construction: a bf16 is the top half of an f32; these f16 values are
    // exactly representable (largest normal, smallest subnormal, a fraction, signed zero).
    let bf16_bits: Vec<u16> = vec![0x3f80, 0xc0a0, 0x0001, 0x7f80, 0x8000, 0x4049];
    let f16_values: [f32; 6] = [65504.0, 5.960_464_5e-8, -0.333_251_95, 0.0, -0.0, 1.5];
    let tensors = vec![
        (
            "b".to_string(),
            TensorData::new(
                bf16_bits.iter().map(|&b| bf16::from_bits(b)).collect(),
                [2, 3],
            ),
        ),
        (
            "h".to_string(),
            TensorData::new(f16_values.iter().map(|&v| f16::from_f32(v)).collect(), [6]),
        ),
    ];
    save(dir.path(), &config(), tensors, None, None).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();

    let b = checkpoint.read("b", DType::F32).unwrap();
    assert_eq!(b.dtype, DType::F32);
    assert_eq!(b.shape.to_vec(), [2, 3]);
    let b: Vec<u32> = b
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    let expected: Vec<u32> = bf16_bits
        .iter()
        .map(|&bits| u32::from(bits) << 16)
        .collect();
    assert_eq!(b, expected);

    let h = checkpoint
        .read("h", DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let h: Vec<u32> = h.iter().map(|v| v.to_bits()).collect();
    let expected: Vec<u32> = f16_values.iter().map(|v| v.to_bits()).collect();
    assert_eq!(h, expected);

    // bf16 -> f16 goes through the exact f32: 1.0, -5.0 and 3.140625 are f16 values too.
    let bh = checkpoint
        .read("b", DType::F16)
        .unwrap()
        .to_vec::<f16>()
        .unwrap();
    assert_eq!(bh[0], f16::from_f32(1.0));
    assert_eq!(bh[1], f16::from_f32(-5.0));
    assert_eq!(bh[5], f16::from_f32(3.140625));
}

#[test]
fn f32_narrows_to_half_rounding_to_nearest_even() {
    let dir = tempfile::tempdir().unwrap();
    // 1 + 2^-8 is halfway between the bf16 neighbours 1 and 1 + 2^-7: ties go to the even 1.
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to the even 1 + 2^-6.
    // 1 + 2^-11 is halfway between f16 neighbours 1 and 1 + 2^-10: to 1.
    let values = vec![
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        1.0 + 2f32.powi(-11),
    ];
    save(
        dir.path(),
        &config(),
        vec![("x".into(), TensorData::new(values, [3]))],
        None,
        None,
    )
    .unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let b = checkpoint.read("x", DType::BF16).unwrap();
    assert_eq!(b.dtype, DType::BF16);
    let b: Vec<f32> = b
        .to_vec::<bf16>()
        .unwrap()
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_eq!(b, [1.0, 1.0 + 2f32.powi(-6), 1.0]);
    let h = checkpoint.read("x", DType::F16).unwrap();
    assert_eq!(h.dtype, DType::F16);
    let h: Vec<f32> = h
        .to_vec::<f16>()
        .unwrap()
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_eq!(h[2], 1.0);
}

#[test]
fn sharded_round_trip_with_index() {
    let dir = tempfile::tempdir().unwrap();
    let tensors = tensors();
    // Sizes in order: 96, 60, 132, 24, 48 bytes. A 160-byte limit fills shards greedily:
    // [96 + 60], [132 + 24], [48].
    save(dir.path(), &config(), tensors.clone(), None, Some(160)).unwrap();
    let shard = |k: usize| format!("model-{k:05}-of-00003.safetensors");
    assert_eq!(
        file_names(dir.path()),
        [
            "config.json".to_string(),
            shard(1),
            shard(2),
            shard(3),
            "model.safetensors.index.json".into()
        ]
    );
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(index["metadata"]["total_size"], 96 + 60 + 132 + 24 + 48);
    let expected_shard = [shard(1), shard(1), shard(2), shard(2), shard(3)];
    for ((name, _), file) in tensors.iter().zip(&expected_shard) {
        assert_eq!(index["weight_map"][name], file.as_str(), "{name}");
    }

    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    for ((name, _), file) in tensors.iter().zip(&expected_shard) {
        assert_eq!(checkpoint.info(name).unwrap().file, dir.path().join(file));
    }
    assert_bit_exact(&checkpoint, &tensors);
    checkpoint
        .check(&expected_shapes(&tensors), |_| false)
        .unwrap();

    // Saving single-file over it (while it is still open) removes the shards and their index;
    // the open checkpoint keeps reading the files it mapped.
    save(
        dir.path(),
        &config(),
        tensors[..2].to_vec(),
        Some(&checkpoint),
        None,
    )
    .unwrap();
    assert_eq!(file_names(dir.path()), ["config.json", "model.safetensors"]);
    assert_bit_exact(&checkpoint, &tensors);
    let again = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(again.names().count(), 2);
    assert_bit_exact(&again, &tensors[..2]);
}

#[test]
fn save_copies_the_tokenizer_and_generation_files() {
    let source = tempfile::tempdir().unwrap();
    save(source.path(), &config(), tensors(), None, None).unwrap();
    let copied = [
        ("tokenizer.json", "{\"t\": 1}"),
        ("tokenizer_config.json", "{\"c\": 2}"),
        ("generation_config.json", "{\"eos_token_id\": 3}"),
        ("special_tokens_map.json", "{\"s\": 4}"),
    ];
    for (name, text) in copied {
        std::fs::write(source.path().join(name), text).unwrap();
    }
    std::fs::write(source.path().join("notes.txt"), "not a checkpoint file").unwrap();
    let checkpoint = Checkpoint::open(source.path()).unwrap();

    let target = tempfile::tempdir().unwrap();
    let out = target.path().join("fine-tuned");
    let tensors: Vec<_> = checkpoint
        .names()
        .map(|n| (n.to_string(), checkpoint.read(n, DType::F32).unwrap()))
        .collect();
    save(&out, checkpoint.config(), tensors, Some(&checkpoint), None).unwrap();
    for (name, text) in copied {
        assert_eq!(
            std::fs::read_to_string(out.join(name)).unwrap(),
            text,
            "{name}"
        );
    }
    assert!(!out.join("notes.txt").exists());
    let saved = Checkpoint::open(&out).unwrap();
    assert!(saved
        .names()
        .all(|n| saved.info(n).unwrap().dtype == DType::F32));

    // Saving into the source directory itself keeps its tokenizer files intact.
    save(source.path(), &config(), vec![], Some(&checkpoint), None).unwrap();
    for (name, text) in copied {
        let path = source.path().join(name);
        assert_eq!(std::fs::read_to_string(path).unwrap(), text, "{name}");
    }
}

#[test]
fn save_refuses_other_dtypes_and_twice_given_names() {
    let dir = tempfile::tempdir().unwrap();
    let ints = vec![("ids".to_string(), TensorData::new(vec![1i64, 2], [2]))];
    let err = save(dir.path(), &config(), ints, None, None).unwrap_err();
    assert!(matches!(err, CheckpointError::Unsupported(_)), "{err}");
    assert!(
        err.to_string().contains("ids") && err.to_string().contains("I64"),
        "{err}"
    );

    let twice = vec![
        ("w".to_string(), TensorData::new(vec![1f32], [1])),
        ("w".to_string(), TensorData::new(vec![2f32], [1])),
    ];
    let err = save(dir.path(), &config(), twice, None, None).unwrap_err();
    assert!(err.to_string().contains("tensor w is given twice"), "{err}");
    assert!(file_names(dir.path()).is_empty(), "nothing written");
}

#[test]
fn check_names_missing_extra_and_misshapen_tensors_with_their_file() {
    let dir = tempfile::tempdir().unwrap();
    let tensors = tensors();
    save(dir.path(), &config(), tensors.clone(), None, Some(160)).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let expected = expected_shapes(&tensors);

    let mut missing = expected.clone();
    missing.push((
        "model.layers.1.mlp.gate.weight".into(),
        vec![4, 6],
        Element::Float,
    ));
    let err = checkpoint.check(&missing, |_| false).unwrap_err();
    assert!(
        matches!(err, CheckpointError::MissingTensor { .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("model.layers.1.mlp.gate.weight"),
        "{message}"
    );
    for k in 1..=3 {
        assert!(
            message.contains(&format!("model-0000{k}-of-00003.safetensors")),
            "{message}"
        );
    }

    let extra: Vec<_> = expected
        .iter()
        .filter(|(n, _, _)| n != "lm_head.weight")
        .cloned()
        .collect();
    let err = checkpoint.check(&extra, |_| false).unwrap_err();
    assert!(
        matches!(err, CheckpointError::UnexpectedTensor { .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("lm_head.weight"), "{message}");
    assert!(
        message.contains("model-00003-of-00003.safetensors"),
        "{message}"
    );
    checkpoint.check(&extra, |n| n == "lm_head.weight").unwrap();

    let mut misshapen = expected.clone();
    misshapen[2].1 = vec![6, 11];
    let err = checkpoint.check(&misshapen, |_| false).unwrap_err();
    assert!(matches!(err, CheckpointError::Shape { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("model.layers.0.mlp.experts.0.w1.weight"),
        "{message}"
    );
    assert!(
        message.contains("model-00002-of-00003.safetensors"),
        "{message}"
    );
    assert!(
        message.contains("expected shape [6, 11], found [11, 6]"),
        "{message}"
    );

    let err = checkpoint.read("model.layers.9.x", DType::F32).unwrap_err();
    assert!(
        matches!(err, CheckpointError::MissingTensor { .. }),
        "{err}"
    );
}

/// Writes a safetensors file of raw `(name, dtype, shape, bytes)` tensors.
fn write_raw(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            (
                *name,
                TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn write_config(dir: &Path) {
    std::fs::write(dir.join("config.json"), config().to_string()).unwrap();
}

fn open_err(dir: &Path) -> (CheckpointError, String) {
    let err = Checkpoint::open(dir).unwrap_err();
    let message = err.to_string();
    (err, message)
}

#[test]
fn unreadable_truncated_and_missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let weights = dir.path().join("model.safetensors");

    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::MissingFile { .. }),
        "{message}"
    );
    assert!(
        message.contains(&dir.path().join("config.json").display().to_string()),
        "{message}"
    );

    std::fs::write(dir.path().join("config.json"), "{ \"hidden_size\": ").unwrap();
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::Unreadable { .. }),
        "{message}"
    );
    assert!(
        message.contains("config.json") && message.contains("invalid JSON"),
        "{message}"
    );

    write_config(dir.path());
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::MissingFile { .. }),
        "{message}"
    );
    assert!(
        message.contains(&weights.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("model.safetensors.index.json"),
        "{message}"
    );

    save(dir.path(), &config(), tensors(), None, None).unwrap();
    let whole = std::fs::read(&weights).unwrap();
    for cut in [whole.len() - 3, 40, 5, 0] {
        std::fs::write(&weights, &whole[..cut]).unwrap();
        let (err, message) = open_err(dir.path());
        assert!(
            matches!(err, CheckpointError::Unreadable { .. }),
            "{cut}: {message}"
        );
        assert!(
            message.contains(&weights.display().to_string()),
            "{message}"
        );
        assert!(message.contains(&format!("{cut} bytes")), "{message}");
    }

    // A well-formed header whose offsets run past the end of the data.
    let header = br#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(&[0u8; 8]);
    std::fs::write(&weights, &file).unwrap();
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::Unreadable { .. }),
        "{message}"
    );

    std::fs::write(&weights, b"PK\x03\x04 a zip archive, not safetensors").unwrap();
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::Unreadable { .. }),
        "{message}"
    );

    std::fs::remove_file(&weights).unwrap();
    std::fs::write(dir.path().join("pytorch_model.bin"), b"pickle").unwrap();
    let (err, message) = open_err(dir.path());
    assert!(matches!(err, CheckpointError::Unsupported(_)), "{message}");
    assert!(message.contains("pytorch_model.bin"), "{message}");
}

#[test]
fn index_naming_a_missing_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    save(dir.path(), &config(), tensors(), None, Some(160)).unwrap();
    let shard = dir.path().join("model-00002-of-00003.safetensors");
    std::fs::remove_file(&shard).unwrap();
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::MissingFile { .. }),
        "{message}"
    );
    assert!(message.contains(&shard.display().to_string()), "{message}");
    assert!(
        message.contains("model.safetensors.index.json"),
        "{message}"
    );
}

#[test]
fn an_index_naming_no_tensor_is_named() {
    // Before, it opened with no file at all, and each tensor was then "missing: not in " (no
    // file named): found by fuzzing (tests/fuzz.rs).
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    write_index(dir.path(), json!({}));
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::Unreadable { .. }),
        "{message}"
    );
    assert!(
        message.contains("model.safetensors.index.json") && message.contains("weight_map is empty"),
        "{message}"
    );
}

fn write_index(dir: &Path, weight_map: serde_json::Value) {
    let index = json!({ "metadata": { "total_size": 0 }, "weight_map": weight_map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn index_and_shards_that_disagree_are_named() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let one = || ("x", Dtype::F32, vec![1], 1f32.to_le_bytes().to_vec());
    let a = dir.path().join("a.safetensors");
    let b = dir.path().join("b.safetensors");

    // A tensor in two shards.
    write_raw(&a, &[one()]);
    write_raw(&b, &[one(), ("y", Dtype::F32, vec![1], vec![0; 4])]);
    write_index(
        dir.path(),
        json!({ "x": "a.safetensors", "y": "b.safetensors" }),
    );
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::Duplicate { .. }),
        "{message}"
    );
    assert!(
        message.contains("tensor x") && message.contains(&a.display().to_string()),
        "{message}"
    );
    assert!(message.contains(&b.display().to_string()), "{message}");

    // The index puts a tensor in a shard that does not hold it.
    write_raw(&b, &[("y", Dtype::F32, vec![1], vec![0; 4])]);
    write_index(
        dir.path(),
        json!({ "x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors" }),
    );
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::Unreadable { .. }),
        "{message}"
    );
    assert!(
        message.contains("index.json") && message.contains("tensor y"),
        "{message}"
    );

    // The index names a tensor its shard does not hold.
    write_index(
        dir.path(),
        json!({ "x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors" }),
    );
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::MissingTensor { .. }),
        "{message}"
    );
    assert!(
        message.contains("tensor z") && message.contains(&b.display().to_string()),
        "{message}"
    );

    // A shard holds a tensor the index does not list.
    write_index(
        dir.path(),
        json!({ "x": "a.safetensors" , "w": "b.safetensors" }),
    );
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::MissingTensor { .. }),
        "{message}"
    );
    write_index(dir.path(), json!({ "x": "a.safetensors" }));
    write_raw(&a, &[one(), ("v", Dtype::F32, vec![1], vec![0; 4])]);
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::Unreadable { .. }),
        "{message}"
    );
    assert!(
        message.contains("tensor v") && message.contains("weight_map"),
        "{message}"
    );
    write_raw(&a, &[one()]);

    // A shard path leading out of the directory.
    write_index(dir.path(), json!({ "x": "../a.safetensors" }));
    let (err, message) = open_err(dir.path());
    assert!(
        matches!(err, CheckpointError::Unreadable { .. }),
        "{message}"
    );
    assert!(message.contains("../a.safetensors"), "{message}");

    write_index(
        dir.path(),
        json!({ "x": "a.safetensors", "y": "b.safetensors" }),
    );
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(
        checkpoint
            .read("x", DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [1.0]
    );
}

#[test]
fn unsupported_dtypes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let weights = dir.path().join("model.safetensors");
    write_raw(
        &weights,
        &[
            ("q", Dtype::I8, vec![2], vec![1, 2]),
            ("d", Dtype::F64, vec![1], 1f64.to_le_bytes().to_vec()),
            ("w", Dtype::F32, vec![1], 1f32.to_le_bytes().to_vec()),
        ],
    );
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.info("q").unwrap().dtype, DType::I8);

    let float = |n: &str, shape: Vec<usize>| (n.to_string(), shape, Element::Float);
    let err = checkpoint
        .check(&[float("q", vec![2]), float("w", vec![1])], |n| n == "d")
        .unwrap_err();
    assert!(matches!(err, CheckpointError::ElementType { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("tensor q") && message.contains("dtype I8, expected F32, F16 or BF16"),
        "{message}"
    );
    // An int8 weight where one is expected (a pre-quantized checkpoint) passes.
    checkpoint
        .check(
            &[
                ("q".into(), vec![2], Element::Exactly(DType::I8)),
                float("w", vec![1]),
            ],
            |n| n == "d",
        )
        .unwrap();
    assert!(
        message.contains(&weights.display().to_string()),
        "{message}"
    );

    let err = checkpoint.read("d", DType::F32).unwrap_err();
    assert!(
        err.to_string().contains("tensor d") && err.to_string().contains("F64"),
        "{err}"
    );
    let err = checkpoint.read("w", DType::I32).unwrap_err();
    assert!(matches!(err, CheckpointError::Unsupported(_)), "{err}");
    checkpoint
        .check(&[float("w", vec![1])], |n| n != "w")
        .unwrap();

    // FP8 e4m3 weights (DeepSeek-V3's release) have no Burn dtype: held as their bytes, read
    // by the FP8 loader only, never as float.
    write_raw(
        &weights,
        &[("w8", Dtype::F8_E4M3, vec![2], vec![0x38, 0x40])],
    );
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let info = checkpoint.info("w8").unwrap();
    assert!(info.float8 && info.dtype == DType::U8, "{info:?}");
    let err = checkpoint.read("w8", DType::F32).unwrap_err();
    assert!(err.to_string().contains("F8_E4M3"), "{err}");
    let err = checkpoint
        .check(&[float("w8", vec![2])], |_| false)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("dtype F8_E4M3, expected F32, F16 or BF16"),
        "{err}"
    );
    checkpoint
        .check(&[("w8".into(), vec![2], Element::Float8)], |_| false)
        .unwrap();
    // Other FP8 formats are refused when opened, by name.
    write_raw(
        &weights,
        &[("w5", Dtype::F8_E5M2, vec![2], vec![0x38, 0x40])],
    );
    let (err, message) = open_err(dir.path());
    assert!(matches!(err, CheckpointError::Dtype { .. }), "{message}");
    assert!(
        message.contains("w5") && message.contains("F8_E5M2"),
        "{message}"
    );
}

/// A byte-level BPE as Qwen2 writes it: a Split pre-tokenizer with Qwen's regex (look-ahead and
/// a case-insensitive group), then ByteLevel without its own regex; BOS added by the template.
/// Vocabulary: `<s>` 0, `</s>` 1, `a` 2, `b` 3, `Ġ` (the space byte) 4, `ab` 5, `Ġab` 6, `!` 7.
fn write_tokenizer(dir: &Path) -> PathBuf {
    let regex = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let special = |id: u32, content: &str| {
        json!({ "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true })
    };
    let tokenizer = json!({
        "version": "1.0",
        "truncation": { "direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0 },
        "padding": null,
        "added_tokens": [special(0, "<s>"), special(1, "</s>")],
        "normalizer": null,
        "pre_tokenizer": { "type": "Sequence", "pretokenizers": [
            { "type": "Split", "pattern": { "Regex": regex }, "behavior": "Isolated", "invert": false },
            { "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false }
        ] },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [ { "SpecialToken": { "id": "<s>", "type_id": 0 } },
                        { "Sequence": { "id": "A", "type_id": 0 } } ],
            "pair": [ { "SpecialToken": { "id": "<s>", "type_id": 0 } },
                      { "Sequence": { "id": "A", "type_id": 0 } },
                      { "Sequence": { "id": "B", "type_id": 1 } } ],
            "special_tokens": { "<s>": { "id": "<s>", "ids": [0], "tokens": ["<s>"] } }
        },
        "decoder": { "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false },
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false,
            "vocab": { "<s>": 0, "</s>": 1, "a": 2, "b": 3, "Ġ": 4, "ab": 5, "Ġab": 6, "!": 7 },
            "merges": [["a", "b"], ["Ġ", "ab"]]
        }
    });
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    path
}

#[test]
fn tokenizer_encodes_with_bos_and_decodes_without_specials() {
    let dir = tempfile::tempdir().unwrap();
    write_tokenizer(dir.path());
    let tokenizer = TextTokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tokenizer.vocab_size(), 8);
    assert!(tokenizer.eos_ids().is_empty(), "no file names an EOS");

    // "ab" + "  ab": \s+(?!\S) leaves the last space to the word after it, so the pre-tokens are
    // "ab", " ", " ab" (and the stored truncation to 2 tokens is not applied).
    assert_eq!(tokenizer.encode("ab  ab").unwrap(), [0, 5, 4, 6]);
    // (?i:'s...) is not in the vocabulary; "ab!": "ab" then "!".
    assert_eq!(tokenizer.encode("ab!").unwrap(), [0, 5, 7]);
    assert_eq!(tokenizer.decode(&[0, 5, 4, 6, 1]).unwrap(), "ab  ab");
    for text in ["ab", " ab ab!", "b a  "] {
        let ids = tokenizer.encode(text).unwrap();
        assert_eq!(ids[0], 0);
        assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    }
}

#[test]
fn tokenizer_clean_up_spaces_follows_tokenizer_config() {
    let dir = tempfile::tempdir().unwrap();
    write_tokenizer(dir.path());
    let config = json!({ "clean_up_tokenization_spaces": true, "eos_token": "</s>" });
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    let tokenizer = TextTokenizer::from_dir(dir.path()).unwrap();
    // " !" becomes "!" as transformers' clean_up_tokenization does.
    assert_eq!(tokenizer.decode(&[5, 4, 7]).unwrap(), "ab!");
}

#[test]
fn eos_ids_from_generation_config_then_config_then_tokenizer_config() {
    let dir = tempfile::tempdir().unwrap();
    write_tokenizer(dir.path());
    let write = |name: &str, value: serde_json::Value| {
        std::fs::write(dir.path().join(name), value.to_string()).unwrap()
    };
    let eos = || {
        TextTokenizer::from_dir(dir.path())
            .unwrap()
            .eos_ids()
            .to_vec()
    };

    write(
        "tokenizer_config.json",
        json!({ "eos_token": { "content": "</s>", "special": true } }),
    );
    assert_eq!(eos(), [1]);
    write("config.json", json!({ "eos_token_id": 7 }));
    assert_eq!(eos(), [7]);
    write("generation_config.json", json!({ "bos_token_id": 0 }));
    assert_eq!(
        eos(),
        [7],
        "no eos_token_id in generation_config.json: config.json's"
    );
    write("generation_config.json", json!({ "eos_token_id": 1 }));
    assert_eq!(eos(), [1]);
    write("generation_config.json", json!({ "eos_token_id": [1, 7] }));
    assert_eq!(eos(), [1, 7]);

    write("generation_config.json", json!({ "eos_token_id": "</s>" }));
    let err = TextTokenizer::from_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("generation_config.json"), "{err}");
    std::fs::remove_file(dir.path().join("generation_config.json")).unwrap();
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    write("tokenizer_config.json", json!({ "eos_token": "<|end|>" }));
    let err = TextTokenizer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, CheckpointError::Tokenizer(_)), "{err}");
    assert!(err.to_string().contains("<|end|>"), "{err}");
}

#[test]
fn tokenizer_files_missing_or_broken_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = TextTokenizer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, CheckpointError::MissingFile { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": 3}").unwrap();
    let err = TextTokenizer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, CheckpointError::Unreadable { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

#[test]
fn tokenizer_files_the_library_panics_on_are_errors_naming_them() {
    // Found by fuzzing (tests/fuzz.rs): the tokenizers library panics on these rather than
    // return an error, the first while reading the file, the second at the first encoding.
    let fixture = std::fs::read_to_string(fixture("qwen3_moe").join("tokenizer.json")).unwrap();
    let cut = fixture.find("\"decoder\"").unwrap() + "\"decoder\": {\n    \"type\"".len();
    let mut template: serde_json::Value = serde_json::from_str(&fixture).unwrap();
    template["post_processor"] = json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<nowhere>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {}
    });
    for (what, text) in [
        ("cut inside its decoder", fixture[..cut].to_string()),
        ("a template naming no token", template.to_string()),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), text).unwrap();
        let err = TextTokenizer::from_dir(dir.path()).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, CheckpointError::Unreadable { .. }),
            "{what}: {message}"
        );
        assert!(
            message.contains(&dir.path().join("tokenizer.json").display().to_string())
                && message.contains("the tokenizers library panicked"),
            "{what}: {message}"
        );
    }
}

/// The pre-tokenizer regexes of published checkpoints run on the pure-Rust engine (fancy-regex,
/// the `tokenizers` build this crate uses) split as the Oniguruma build under transformers does:
/// the expected splits were recorded with Python `tokenizers` 0.22.2 (Oniguruma). Qwen2/Qwen3
/// (look-ahead, case-insensitive group), DeepSeek-V3 (`\p{N}{1,3}`, CJK ranges, `\p{M}`/`\p{P}`/
/// `\p{S}`), GPT-2's built-in ByteLevel regex; on Unicode spaces, combining marks and line breaks.
#[test]
fn published_pre_tokenizer_regexes_split_as_oniguruma_does() {
    use tokenizers::PreTokenizerWrapper;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    let text =
        "Hello  WORLD'S 12345 caf\u{e9}\u{301} na\u{ef}ve\u{a0}x\u{3000}y\ttab\r\n\n  end!!? \
                東京タワーです 123abc .NET's\u{2009}\u{2028}z   ";
    let qwen = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let deepseek_v3 = [
        r"\p{N}{1,3}",
        "[一-龥぀-ゟ゠-ヿ]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    ];
    let split = |regex: &str| json!({ "type": "Split", "pattern": { "Regex": regex }, "behavior": "Isolated", "invert": false });
    let byte_level = json!({ "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false });
    let mut deepseek: Vec<_> = deepseek_v3.iter().map(|r| split(r)).collect();
    deepseek.push(byte_level.clone());
    let cases = [
        (
            "qwen2",
            json!({ "type": "Sequence", "pretokenizers": [split(qwen), byte_level] }),
            vec![
                "Hello",
                "Ġ",
                "ĠWORLD",
                "'S",
                "Ġ",
                "1",
                "2",
                "3",
                "4",
                "5",
                "ĠcafÃ©",
                "Ìģ",
                "ĠnaÃ¯ve",
                "Âłx",
                "ãĢĢy",
                "ĉtab",
                "čĊĊ",
                "Ġ",
                "Ġend",
                "!!?",
                "ĠæĿ±äº¬ãĤ¿ãĥ¯ãĥ¼ãģ§ãģĻ",
                "Ġ",
                "1",
                "2",
                "3",
                "abc",
                "Ġ.",
                "NET",
                "'s",
                "âĢī",
                "âĢ¨z",
                "ĠĠĠ",
            ],
        ),
        (
            "deepseek_v3",
            json!({ "type": "Sequence", "pretokenizers": deepseek }),
            vec![
                "Hello",
                "Ġ",
                "ĠWORLD",
                "'S",
                "Ġ",
                "123",
                "45",
                "ĠcafÃ©Ìģ",
                "ĠnaÃ¯ve",
                "Âłx",
                "ãĢĢy",
                "ĉtab",
                "čĊĊ",
                "Ġ",
                "Ġend",
                "!!?",
                "Ġ",
                "æĿ±äº¬ãĤ¿ãĥ¯ãĥ¼ãģ§ãģĻ",
                "Ġ",
                "123",
                "abc",
                "Ġ.",
                "NET",
                "'s",
                "âĢī",
                "âĢ¨z",
                "ĠĠĠ",
            ],
        ),
        (
            "gpt2",
            json!({ "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true }),
            vec![
                "Hello",
                "Ġ",
                "ĠWORLD",
                "'",
                "S",
                "Ġ12345",
                "ĠcafÃ©",
                "Ìģ",
                "ĠnaÃ¯ve",
                "Âł",
                "x",
                "ãĢĢ",
                "y",
                "ĉ",
                "tab",
                "čĊĊĠ",
                "Ġend",
                "!!?",
                "ĠæĿ±äº¬ãĤ¿ãĥ¯ãĥ¼ãģ§ãģĻ",
                "Ġ123",
                "abc",
                "Ġ.",
                "NET",
                "'s",
                "âĢī",
                "âĢ¨",
                "z",
                "ĠĠĠ",
            ],
        ),
    ];
    for (name, config, expected) in cases {
        let pre_tokenizer: PreTokenizerWrapper = serde_json::from_value(config).unwrap();
        let mut splits = PreTokenizedString::from(text);
        pre_tokenizer.pre_tokenize(&mut splits).unwrap();
        let splits: Vec<&str> = splits
            .get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(s, _, _)| s)
            .collect();
        assert_eq!(splits, expected, "{name}");
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(name)
}

const FIXTURES: [(&str, DType); 5] = [
    ("mixtral", DType::F32),
    ("qwen2_moe", DType::BF16),
    ("qwen3_moe", DType::F16),
    ("deepseek_v2", DType::F32),
    ("deepseek_v3", DType::F32),
];

/// The checkpoints transformers wrote (scripts/hf_fixtures) open, with their dtype, and every
/// tensor reads; the tokenizer gives transformers' `tokenizer(text)` ids for each recorded
/// prompt, decodes them back to the text, and stops on generation_config.json's EOS ids.
#[test]
fn fixture_checkpoints_and_tokenizers_match_transformers() {
    let eos: [&[u32]; 5] = [&[2], &[300], &[302, 300], &[1], &[1]];
    for ((name, dtype), eos) in FIXTURES.into_iter().zip(eos) {
        let dir = fixture(name);
        let checkpoint = Checkpoint::open(&dir).unwrap();
        assert!(checkpoint.config()["architectures"].is_array(), "{name}");
        assert!(checkpoint.names().count() > 10, "{name}");
        for tensor in checkpoint.names() {
            let info = checkpoint.info(tensor).unwrap();
            assert_eq!(info.dtype, dtype, "{name}: {tensor}");
            let data = checkpoint.read(tensor, DType::F32).unwrap();
            assert_eq!(data.shape.to_vec(), info.shape, "{name}: {tensor}");
            assert!(
                data.to_vec::<f32>().unwrap().iter().all(|v| v.is_finite()),
                "{name}: {tensor}"
            );
        }

        let tokenizer = TextTokenizer::from_dir(&dir).unwrap();
        assert_eq!(tokenizer.eos_ids(), eos, "{name}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap())
                .unwrap();
        let mut ids: Vec<u64> = json["model"]["vocab"]
            .as_object()
            .unwrap()
            .values()
            .chain(
                json["added_tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| &t["id"]),
            )
            .map(|id| id.as_u64().unwrap())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(tokenizer.vocab_size(), ids.len(), "{name}");

        let reference: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
                .unwrap();
        for prompt in reference["prompts"].as_array().unwrap() {
            let text = prompt["text"].as_str().unwrap();
            let expected: Vec<u32> = prompt["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_u64().unwrap() as u32)
                .collect();
            let ids = tokenizer.encode(text).unwrap();
            assert_eq!(ids, expected, "{name}: {text:?}");
            assert_eq!(tokenizer.decode(&ids).unwrap(), text, "{name}");
        }
    }
}

/// bf16 weights widen to the f32 whose top half they are, bit for bit.
#[test]
fn fixture_bf16_weights_widen_exactly() {
    let checkpoint = Checkpoint::open(fixture("qwen2_moe")).unwrap();
    let name = checkpoint.names().next().unwrap().to_string();
    let stored = checkpoint.read(&name, DType::BF16).unwrap();
    let widened = checkpoint.read(&name, DType::F32).unwrap();
    let expected: Vec<u32> = stored
        .to_vec::<bf16>()
        .unwrap()
        .iter()
        .map(|v| u32::from(v.to_bits()) << 16)
        .collect();
    let widened: Vec<u32> = widened
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(widened, expected);
}

/// A fixture read and saved again (sharded differently) reopens with the same tensors, bit for
/// bit in their dtype, and the same tokenizer files.
#[test]
fn fixture_saved_again_reopens_identical() {
    for (name, _) in FIXTURES {
        let source = Checkpoint::open(fixture(name)).unwrap();
        let tensors: Vec<(String, TensorData)> = source
            .names()
            .map(|n| {
                (
                    n.to_string(),
                    source.read(n, source.info(n).unwrap().dtype).unwrap(),
                )
            })
            .collect();
        let out = tempfile::tempdir().unwrap();
        save(
            out.path(),
            source.config(),
            tensors.clone(),
            Some(&source),
            Some(150_000),
        )
        .unwrap();
        let saved = Checkpoint::open(out.path()).unwrap();
        assert!(saved.files().len() > 1, "{name}: sharded");
        assert_eq!(saved.config(), source.config(), "{name}");
        assert_eq!(
            saved.names().collect::<Vec<_>>(),
            source.names().collect::<Vec<_>>(),
            "{name}"
        );
        assert_bit_exact(&saved, &tensors);
        for file in [
            "tokenizer.json",
            "tokenizer_config.json",
            "generation_config.json",
            "special_tokens_map.json",
        ] {
            assert_eq!(
                std::fs::read(out.path().join(file)).unwrap(),
                std::fs::read(fixture(name).join(file)).unwrap(),
                "{name}: {file}"
            );
        }
        assert!(!out.path().join("reference.json").exists());
    }
}
