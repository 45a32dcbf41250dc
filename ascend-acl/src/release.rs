//! CANN releases, and the oldest release that declares each function of the list.
//!
//! A function the loaded CANN lacks is simply not exported (`dlsym` fails): the table then has no
//! graph support, no forced reset, or an operator that fails with `MissingOp`, and the backend
//! composes what it can from the operators that release has. The emulated runtime uses
//! [`introduced_in`] to refuse the functions its configured release lacks, so a test on the
//! emulator sees what a user of that release sees.

use std::fmt;
use std::str::FromStr;

/// A CANN release: `8.1.RC1`, `8.0.0`, `8.5.0`. Release candidates come before the release of
/// the same minor version (`8.1.RC1 < 8.1.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CannRelease {
    major: u8,
    minor: u8,
    patch: Patch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Patch {
    Candidate(u8),
    Final(u8),
}

impl CannRelease {
    /// CANN 8.0.0: the oldest release this project targets; every function of the list without
    /// an entry in [`NEWER_FUNCTIONS`] is declared by its headers.
    pub const V8_0_0: Self = Self::new(8, 0, Patch::Final(0));
    /// CANN 8.1.RC1: the ACL graph functions and `aclrtResetDeviceForce` appear.
    pub const V8_1_RC1: Self = Self::new(8, 1, Patch::Candidate(1));
    /// CANN 8.5.0.
    pub const V8_5_0: Self = Self::new(8, 5, Patch::Final(0));

    const fn new(major: u8, minor: u8, patch: Patch) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for CannRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Patch::Candidate(n) => write!(f, "{}.{}.RC{n}", self.major, self.minor),
            Patch::Final(n) => write!(f, "{}.{}.{n}", self.major, self.minor),
        }
    }
}

impl FromStr for CannRelease {
    type Err = String;

    /// `8.1.RC1`, `8.0.0`, or `8.5` (read as `8.5.0`).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a CANN release: write it as 8.1.RC1, 8.0.0 or 8.5");
        let mut parts = s.trim().split('.');
        let number = |p: Option<&str>| p.and_then(|p| p.parse::<u8>().ok()).ok_or_else(bad);
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        let patch = match parts.next() {
            None => Patch::Final(0),
            Some(p) => match p.strip_prefix("RC").or_else(|| p.strip_prefix("rc")) {
                Some(rc) => Patch::Candidate(rc.parse().map_err(|_| bad())?),
                None => Patch::Final(p.parse().map_err(|_| bad())?),
            },
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self::new(major, minor, patch))
    }
}

/// The functions of the list that CANN 8.0.0 does not declare, with the oldest release that
/// does. Phase two of an operator (`aclnnXxx`) shares its phase one's entry.
pub const NEWER_FUNCTIONS: &[(&str, CannRelease)] = &[
    // aclgraph-abi.md §2: the capture API first ships in 8.1.RC1.
    ("aclmdlRICaptureBegin", CannRelease::V8_1_RC1),
    ("aclmdlRICaptureGetInfo", CannRelease::V8_1_RC1),
    ("aclmdlRICaptureEnd", CannRelease::V8_1_RC1),
    ("aclmdlRICaptureThreadExchangeMode", CannRelease::V8_1_RC1),
    ("aclmdlRIExecuteAsync", CannRelease::V8_1_RC1),
    ("aclmdlRIDestroy", CannRelease::V8_1_RC1),
    // acl-abi.md §3.1: not in the 8.0 header; declared by 8.1.RC1's acl_rt.h.
    ("aclrtResetDeviceForce", CannRelease::V8_1_RC1),
    // aclnn-ops.tsv (aclnnGroupedMatmulV4): the version torch_npu uses from the 8.1 branch on.
    // ASSUMPTION: first declared by 8.1.RC1.
    (
        "aclnnGroupedMatmulV4GetWorkspaceSize",
        CannRelease::V8_1_RC1,
    ),
    // aclnn-quant-attention-norm.md: declared by the 8.1.RC1 headers; not in aclnn-ops.tsv.
    // ASSUMPTION (the stricter reading): first declared by 8.1.RC1.
    (
        "aclnnMoeInitRoutingQuantV2GetWorkspaceSize",
        CannRelease::V8_1_RC1,
    ),
    // aclnn-ops.tsv (aclnnFusedInferAttentionScoreV3): "hdr + torch_npu/op-plugin uses since
    // CANN 8.1.RC1". ASSUMPTION: first declared by 8.1.RC1.
    (
        "aclnnFusedInferAttentionScoreV3GetWorkspaceSize",
        CannRelease::V8_1_RC1,
    ),
    // aclnn-fused-decode-ops.md §3.2: declared by the 8.1.RC1 headers (aclnn-ops.tsv calls its
    // availability before 8.5 UNCERTAIN; the fact sheet corrects it). ASSUMPTION (the stricter
    // reading): first declared by 8.1.RC1.
    (
        "aclnnMoeGatingTopKSoftmaxV2GetWorkspaceSize",
        CannRelease::V8_1_RC1,
    ),
    // aclnn-fused-decode-ops.md §4.7: declared by the 8.1.RC1 headers; the sheets say nothing of
    // 8.0. ASSUMPTION (stricter): first declared by 8.1.RC1.
    (
        "aclnnMoeFinalizeRoutingV2GetWorkspaceSize",
        CannRelease::V8_1_RC1,
    ),
    // aclnn-fused-decode-ops.md §2.2: declared by 8.1.RC1 under `aclnnop/level2/` only.
    // ASSUMPTION (stricter): first declared by 8.1.RC1.
    (
        "aclnnRopeWithSinCosCacheGetWorkspaceSize",
        CannRelease::V8_1_RC1,
    ),
    // aclnn-fused-decode-ops.md §9.1: declared by 8.1.RC1's `aclnn_scatter_update.h`; the sheets
    // say nothing of 8.0. ASSUMPTION (stricter): first declared by 8.1.RC1.
    (
        "aclnnInplaceScatterUpdateGetWorkspaceSize",
        CannRelease::V8_1_RC1,
    ),
    // Absent from the CANN 8.1.RC1 operator headers (checked for issue 21); aclnn-ops.tsv:
    // used by op-plugin from 8.5 on. ASSUMPTION: first declared by 8.5.0.
    ("aclnnRightShiftGetWorkspaceSize", CannRelease::V8_5_0),
];

/// The oldest CANN release that declares `name` (a function of the list).
pub fn introduced_in(name: &str) -> CannRelease {
    let phase1;
    let key = if name.starts_with("aclnn") && !name.ends_with("GetWorkspaceSize") {
        phase1 = format!("{name}GetWorkspaceSize");
        phase1.as_str()
    } else {
        name
    };
    NEWER_FUNCTIONS
        .iter()
        .find(|(n, _)| *n == key)
        .map_or(CannRelease::V8_0_0, |&(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! listed_names {
        (
            runtime { $(fn $rname:ident($($rarg:ident: $rty:ty),*) -> $rret:ty;)* }
            nnopbase { $(fn $bname:ident($($barg:ident: $bty:ty),*) -> $bret:ty;)* }
            optional { $(fn $xname:ident($($xarg:ident: $xty:ty),*) -> $xret:ty;)* }
            graph { $(fn $gname:ident($($garg:ident: $gty:ty),*) -> $gret:ty;)* }
            ops { $($op:ident / $ws:ident($($oarg:ident: $oty:ty),*);)* }
        ) => {
            const LISTED: &[&str] = &[
                $(stringify!($rname),)* $(stringify!($bname),)* $(stringify!($xname),)*
                $(stringify!($gname),)* $(stringify!($ws),)*
            ];
        };
    }
    crate::acl_function_list!(listed_names);

    #[test]
    fn every_newer_function_is_a_function_of_the_list() {
        for (name, _) in NEWER_FUNCTIONS {
            assert!(LISTED.contains(name), "{name} is not in the function list");
        }
    }

    #[test]
    fn releases_parse_and_order_as_cann_numbers_them() {
        let parse = |s: &str| s.parse::<CannRelease>().unwrap();
        assert_eq!(parse("8.1.RC1"), CannRelease::V8_1_RC1);
        assert_eq!(parse("8.5"), CannRelease::V8_5_0);
        assert!(parse("8.0.RC3") < CannRelease::V8_0_0);
        assert!(CannRelease::V8_0_0 < CannRelease::V8_1_RC1);
        assert!(CannRelease::V8_1_RC1 < parse("8.1.0"));
        assert!(parse("8.1.0") < CannRelease::V8_5_0);
        assert_eq!(CannRelease::V8_1_RC1.to_string(), "8.1.RC1");
        for bad in ["", "8", "8.x", "8.1.RC", "8.1.0.1", "latest"] {
            assert!(bad.parse::<CannRelease>().is_err(), "{bad:?}");
        }
        assert_eq!(introduced_in("aclnnRightShift"), CannRelease::V8_5_0);
        assert_eq!(introduced_in("aclnnAdd"), CannRelease::V8_0_0);
        assert_eq!(introduced_in("aclmdlRIDestroy"), CannRelease::V8_1_RC1);
    }
}
