//! Query-grouped folds: a deterministic greedy assignment, the rule of scikit-learn's
//! `GroupKFold` (without shuffling) with ties in group size broken by a fixed order.

use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The fold (`0..k`) of every sample, grouped by `groups[i]` so no group is split. The
/// rule, deterministic and independent of the order of the samples:
///
/// 1. the distinct groups are sorted by id (byte order, which for UTF-8 is code-point
///    order, as `np.unique` sorts strings);
/// 2. they are taken by size, **largest first; equal sizes in descending id order** (the
///    reverse of a stable ascending sort by size);
/// 3. each goes to the fold with the fewest samples so far, ties to the lowest fold index.
///
/// This is scikit-learn's `GroupKFold(n_splits=k)` rule (`shuffle=False`), but its folds
/// are the same as scikit-learn's only when scikit-learn orders equal sizes the same way:
/// when no two groups have the same size, or when it sorts stably, as scikit-learn 1.9.1
/// does (`np.argsort(..., kind="stable")`; the tests compare with its folds, ties
/// included). Older releases call numpy's default `argsort`, which is not stable (numpy
/// 2.4.6 on an AVX2 machine reorders ties among as few as four values), so with tied
/// group sizes (the usual case: `K` prefixes for most queries) their folds can differ
/// from these. The probe therefore reports every row's fold, and
/// `tests/data/probe/check_sklearn.py` takes the folds from that report instead of
/// recomputing them.
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
    // Stable ascending sort by size, then reversed: largest first, ties by descending id.
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
