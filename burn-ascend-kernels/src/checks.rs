//! The device-side checks of the kernels and the switch for the costly ones.
//!
//! Every kernel checks, on the device, what is cheap to check there: the values it reads anyway
//! (indices in range, lengths that do not decrease, page ids), compared on the scalar unit. A
//! failed check prints the bad value and traps (`Require` in `kernels/kernel_common.h`), so the
//! launch fails with an AI Core error at the next synchronisation instead of computing on bad
//! input. Checks that cost real traffic (that `moe_gather`'s indices form a permutation: every
//! block reads all of them) run only when [`ENV_VALIDATE`] is `1`.

use std::sync::OnceLock;

/// Environment variable: `1` turns on the device-side checks that cost traffic, `0` (or unset)
/// leaves only the cheap ones. Read once.
pub const ENV_VALIDATE: &str = "BURN_ASCEND_VALIDATE";

/// Whether the costly device-side checks run ([`ENV_VALIDATE`]), or why the variable is not
/// understood.
pub fn validation() -> Result<bool, String> {
    static SWITCH: OnceLock<Result<bool, String>> = OnceLock::new();
    SWITCH
        .get_or_init(|| parse(std::env::var(ENV_VALIDATE).ok().as_deref()))
        .clone()
}

fn parse(value: Option<&str>) -> Result<bool, String> {
    match value.map(str::trim) {
        None | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(other) => Err(format!(
            "{ENV_VALIDATE}={other:?} is not understood: use 1 or 0"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_takes_0_and_1_and_names_itself_otherwise() {
        assert_eq!(parse(None), Ok(false));
        assert_eq!(parse(Some("0")), Ok(false));
        assert_eq!(parse(Some(" 1 ")), Ok(true));
        let err = parse(Some("yes")).unwrap_err();
        assert!(err.contains("BURN_ASCEND_VALIDATE=\"yes\""), "{err}");
    }
}
