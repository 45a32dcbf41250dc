//! The one error type of checkpoint, tokenizer and saving code.

use std::path::{Path, PathBuf};

/// Why a Hugging Face checkpoint directory could not be read, checked or written. Every message
/// names the file, and the tensor with its shapes or dtype where one is concerned.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file exists but could not be opened, mapped or parsed.
    #[error("cannot read {}: {why}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What went wrong (the parser's or the OS's message).
        why: String,
    },
    /// A file the checkpoint needs is not there.
    #[error("missing file {}: {why}", path.display())]
    MissingFile {
        /// The file that was looked for.
        path: PathBuf,
        /// Who needs it.
        why: String,
    },
    /// An architecture, config option, file kind or dtype that is not supported, named.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An expected tensor is in none of the checkpoint's files.
    #[error("tensor {name} is missing: not in {}", list(files))]
    MissingTensor {
        /// The tensor's name.
        name: String,
        /// The files searched.
        files: Vec<PathBuf>,
    },
    /// A file holds a tensor the model has no place for.
    #[error("unexpected tensor {name} in {}: the model has no such parameter", file.display())]
    UnexpectedTensor {
        /// The tensor's name.
        name: String,
        /// The file holding it.
        file: PathBuf,
    },
    /// Two files (or an index and a file) disagree about where a tensor is.
    #[error("tensor {name} is in both {} and {}", first.display(), second.display())]
    Duplicate {
        /// The tensor's name.
        name: String,
        /// Where it was seen first.
        first: PathBuf,
        /// Where it was seen again.
        second: PathBuf,
    },
    /// A tensor's shape is not the one the model expects.
    #[error("tensor {name} in {}: expected shape {expected:?}, found {found:?}", file.display())]
    Shape {
        /// The tensor's name.
        name: String,
        /// The file holding it.
        file: PathBuf,
        /// The shape the model (or config.json) asks for.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor's element type is not one of F32, F16 and BF16.
    #[error("tensor {name} in {}: dtype {dtype} is not supported (F32, F16 and BF16 are)", file.display())]
    Dtype {
        /// The tensor's name.
        name: String,
        /// The file holding it.
        file: PathBuf,
        /// The dtype found, as the file names it.
        dtype: String,
    },
    /// A tensor's element type is not one the model reads it as (an int8 weight stored as
    /// float, a scale stored as int, a description naming a scheme the file does not hold).
    #[error("tensor {name} in {}: dtype {found}, expected {expected}", file.display())]
    ElementType {
        /// The tensor's name.
        name: String,
        /// The file holding it.
        file: PathBuf,
        /// The element types the model reads it as.
        expected: String,
        /// The dtype found, as the file names it.
        found: String,
    },
    /// The tokenizer files could not be loaded, or encoding/decoding failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A file of a checkpoint being saved could not be written.
    #[error("cannot write {}: {why}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
}

fn list(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl CheckpointError {
    pub(crate) fn unreadable(path: &Path, why: impl ToString) -> Self {
        Self::Unreadable {
            path: path.to_path_buf(),
            why: why.to_string(),
        }
    }

    pub(crate) fn write(path: &Path, why: impl ToString) -> Self {
        Self::Write {
            path: path.to_path_buf(),
            why: why.to_string(),
        }
    }
}
