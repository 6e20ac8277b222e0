//! Query-grouped folds, assigned as scikit-learn's `GroupKFold` (without shuffling) does.

use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The fold (`0..k`) of every sample, grouped by `groups[i]` so no group is split, with
/// scikit-learn's `GroupKFold(n_splits=k)` rule (1.6+, `shuffle=False`): the distinct
/// groups are sorted (`np.unique`: by value), then taken in order of size, largest first
/// (a stable ascending sort reversed, so equal sizes go in descending group order), each
/// to the fold with the fewest samples so far (ties to the lower fold index).
///
/// Errors: `k < 2`, or more folds than groups (as scikit-learn refuses).
pub fn group_k_fold<S: AsRef<str>>(groups: &[S], k: usize) -> Result<Vec<usize>> {
    if k < 2 {
        return Err(Error::invalid(
            "folds",
            format!("{k} folds: at least 2 are needed"),
        ));
    }
    // Distinct groups in sorted order, with their sizes.
    let mut size: BTreeMap<&str, usize> = BTreeMap::new();
    for g in groups {
        *size.entry(g.as_ref()).or_default() += 1;
    }
    if k > size.len() {
        return Err(Error::invalid(
            "folds",
            format!("{k} folds need at least {k} groups (queries), got {}", size.len()),
        ));
    }
    let uniq: Vec<(&str, usize)> = size.into_iter().collect();
    // Stable ascending sort by size, then reversed: the ties go in descending order.
    let mut order: Vec<usize> = (0..uniq.len()).collect();
    order.sort_by_key(|&i| uniq[i].1);
    order.reverse();
    let mut load = vec![0usize; k];
    let mut fold_of: BTreeMap<&str, usize> = BTreeMap::new();
    for i in order {
        let lightest = (0..k).min_by_key(|&f| (load[f], f)).unwrap_or(0);
        load[lightest] += uniq[i].1;
        fold_of.insert(uniq[i].0, lightest);
    }
    Ok(groups.iter().map(|g| fold_of[g.as_ref()]).collect())
}
