//! The one table of element types: their `aclDataType` codes, sizes and kinds.

use super::types::dtype::*;

/// An element type the backend stores on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum DataType {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    Bool,
}

/// Every element type, in table order.
pub const ALL_DATA_TYPES: [DataType; 13] = [
    DataType::F64,
    DataType::F32,
    DataType::F16,
    DataType::BF16,
    DataType::I64,
    DataType::I32,
    DataType::I16,
    DataType::I8,
    DataType::U64,
    DataType::U32,
    DataType::U16,
    DataType::U8,
    DataType::Bool,
];

impl DataType {
    /// (aclDataType code, bytes per element, name as CANN prints it)
    const fn facts(self) -> (i32, usize, &'static str) {
        match self {
            DataType::F64 => (ACL_DOUBLE, 8, "DT_DOUBLE"),
            DataType::F32 => (ACL_FLOAT, 4, "DT_FLOAT"),
            DataType::F16 => (ACL_FLOAT16, 2, "DT_FLOAT16"),
            DataType::BF16 => (ACL_BF16, 2, "DT_BF16"),
            DataType::I64 => (ACL_INT64, 8, "DT_INT64"),
            DataType::I32 => (ACL_INT32, 4, "DT_INT32"),
            DataType::I16 => (ACL_INT16, 2, "DT_INT16"),
            DataType::I8 => (ACL_INT8, 1, "DT_INT8"),
            DataType::U64 => (ACL_UINT64, 8, "DT_UINT64"),
            DataType::U32 => (ACL_UINT32, 4, "DT_UINT32"),
            DataType::U16 => (ACL_UINT16, 2, "DT_UINT16"),
            DataType::U8 => (ACL_UINT8, 1, "DT_UINT8"),
            DataType::Bool => (ACL_BOOL, 1, "DT_BOOL"),
        }
    }

    /// The `aclDataType` code.
    pub const fn acl(self) -> i32 {
        self.facts().0
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        self.facts().1
    }

    /// The name CANN uses in messages (`DT_FLOAT`...).
    pub const fn name(self) -> &'static str {
        self.facts().2
    }

    /// The element type of an `aclDataType` code, if the backend knows it.
    pub fn from_acl(code: i32) -> Option<Self> {
        ALL_DATA_TYPES.into_iter().find(|d| d.acl() == code)
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F64 | DataType::F32 | DataType::F16 | DataType::BF16
        )
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
