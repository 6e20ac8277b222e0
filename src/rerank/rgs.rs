//! RGS, the graph-search baseline of App. C.2.

use super::run::Run;
use crate::backend::gp::RowReader;
use crate::error::Result;

/// RGS (App. C.2): score the MIPS top-`seeds` in one call and push them on a max-heap by
/// oracle score (capped at `heap_cap`); repeatedly pop the best-scored document not yet
/// expanded and score, in one call, its unscored neighbours in the `degree`-NN graph (by
/// kernel value, ties to the lower index), push them and truncate the heap, until the
/// budget is spent. When the heap empties, the next unscored document in MIPS order seeds
/// (App. C.2 does not say; this keeps the budget working). With `seeds = budget` it is
/// single-stage rerank. The graph is never built whole: an expanded document's neighbours
/// come from its kernel row, read where the pool lives when it is expanded (at most
/// `budget` rows, `O(N d)` each); the paper's DiskANN graph is approximate, this one is
/// exact.
pub(super) fn rgs(
    run: &mut Run<'_>,
    kernel: &mut dyn RowReader,
    budget: usize,
    seeds: usize,
    degree: usize,
    heap_cap: usize,
) -> Result<()> {
    let n = run.n;
    let mut row = vec![0.0f64; n];
    let mut neighbours = |j: usize| -> Result<Vec<usize>> {
        kernel.row(j, &mut row)?;
        let row = &row;
        let mut o: Vec<usize> = (0..n).filter(|&i| i != j).collect();
        let by = |a: &usize, b: &usize| row[*b].total_cmp(&row[*a]).then(a.cmp(b));
        if o.len() > degree {
            o.select_nth_unstable_by(degree - 1, by);
            o.truncate(degree);
        }
        o.sort_by(by);
        Ok(o)
    };
    // Kept sorted: best score first, ties to the lower index.
    let mut heap: Vec<(f64, usize)> = Vec::new();
    let order = |heap: &mut Vec<(f64, usize)>| {
        heap.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        heap.truncate(heap_cap);
    };
    let first: Vec<usize> = (0..seeds.min(budget).min(n)).collect();
    let ys = run.call(&first)?;
    heap.extend(ys.into_iter().zip(first));
    order(&mut heap);
    let mut next_seed = 0;
    while run.scored.len() < budget {
        if heap.is_empty() {
            while next_seed < n && run.y[next_seed].is_some() {
                next_seed += 1;
            }
            if next_seed >= n {
                break;
            }
            let y = run.call(&[next_seed])?[0];
            heap.push((y, next_seed));
            continue;
        }
        let (_, top) = heap.remove(0);
        let left = budget - run.scored.len();
        let fresh: Vec<usize> = neighbours(top)?
            .into_iter()
            .filter(|&i| run.y[i].is_none())
            .take(left)
            .collect();
        let ys = run.call(&fresh)?;
        heap.extend(ys.into_iter().zip(fresh));
        order(&mut heap);
    }
    Ok(())
}
