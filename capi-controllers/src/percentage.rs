//! Percentages of a count, as upstream's `intstr.GetScaledValueFromIntOrPercent` computes them,
//! for `maxSurge`, `maxUnavailable` and `unhealthyLessThanOrEqualTo`.

/// `text` (like `"25%"`) as a share of `total`, rounded up or down; `None` when `text` is not a
/// non-negative whole percentage. Never overflows: a share above `i32::MAX` is `i32::MAX`, and any
/// percentage the CRD's pattern accepts (however many digits) is either that or `None`.
pub(crate) fn of(text: &str, total: i32, round_up: bool) -> Option<i32> {
    let percent: u64 = text.strip_suffix('%')?.parse().ok()?;
    let product = u128::from(percent) * u128::from(total.max(0).unsigned_abs());
    let share = if round_up {
        product.div_ceil(100)
    } else {
        product / 100
    };
    Some(i32::try_from(share).unwrap_or(i32::MAX))
}

#[cfg(test)]
mod tests {
    use super::of;

    #[test]
    fn rounds_as_upstream() {
        assert_eq!(of("25%", 10, true), Some(3));
        assert_eq!(of("25%", 10, false), Some(2));
        assert_eq!(of("0%", 10, true), Some(0));
        assert_eq!(of("100%", 0, true), Some(0));
        assert_eq!(of("40%", -3, false), Some(0));
    }

    #[test]
    fn refuses_what_is_not_a_percentage() {
        for text in [
            "25",
            "-5%",
            "%",
            "2.5%",
            "abc%",
            " 5%",
            "99999999999999999999999%",
        ] {
            assert_eq!(of(text, 10, true), None, "{text}");
        }
    }

    #[test]
    fn a_nineteen_digit_percentage_saturates_instead_of_overflowing() {
        assert_eq!(of("9223372036854775807%", i32::MAX, true), Some(i32::MAX));
        assert_eq!(of("9999999999999999999%", 1000, false), Some(i32::MAX));
    }
}
