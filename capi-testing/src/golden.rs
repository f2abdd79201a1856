//! Golden files: a test's readable output (a rendered document, a simulated rollout's log) is
//! kept beside the test, so a change of behaviour shows as a diff in review.
//!
//! ```no_run
//! capi_testing::golden::check(
//!     concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/rollout.log"),
//!     "step 1: create cp-0\n",
//! );
//! ```

use std::path::Path;

/// Panics unless the file at `path` holds exactly `actual`, naming the file and showing what was
/// produced. With `UPDATE_GOLDEN` set in the environment it writes `actual` to the file instead,
/// for review in the diff.
pub fn check(path: impl AsRef<Path>, actual: &str) {
    let path = path.as_ref();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        if let Err(error) = std::fs::write(path, actual) {
            panic!("writing {}: {error}", path.display());
        }
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs from what the test produced; rerun with UPDATE_GOLDEN=1 and review the diff:\n{actual}",
        path.display()
    );
}
