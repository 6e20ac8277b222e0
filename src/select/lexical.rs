//! Lexical similarity for the lexical MMR scorer (SPEC §1):
//! `LexSim = w_tfidf·cos_tfidf + w_jac·Jaccard(word bigrams)`.
//!
//! Tokens are lower-cased Unicode alphanumeric runs. TF-IDF uses raw term counts and the
//! smoothed idf `ln((1+n)/(1+df)) + 1` over the documents given (pool, retained and query
//! together), l2-normalised: the defaults of scikit-learn's `TfidfVectorizer`.

use super::scorers::Similarity;
use std::collections::HashMap;

/// Splits `text` into lower-cased Unicode alphanumeric runs.
#[must_use]
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A document's lexical profile: sparse l2-normalised TF-IDF and its word-bigram set.
#[derive(Clone, Debug)]
struct Profile {
    tfidf: Vec<(u32, f64)>,
    bigrams: Vec<u64>,
}

/// Lexical similarity over a set of documents; the last one is the query.
pub struct Lexical {
    docs: Vec<Profile>,
    weights: [f64; 2],
}

impl Lexical {
    /// Profiles `pool` and `query` together (`weights` = `(w_tfidf, w_jaccard)`).
    #[must_use]
    pub fn new<S: AsRef<str>>(pool: &[S], query: &str, weights: [f64; 2]) -> Self {
        let mut vocab: HashMap<String, u32> = HashMap::new();
        let tokenized: Vec<Vec<u32>> = pool
            .iter()
            .map(AsRef::as_ref)
            .chain(std::iter::once(query))
            .map(|t| {
                tokenize(t)
                    .into_iter()
                    .map(|w| {
                        let next = vocab.len() as u32;
                        *vocab.entry(w).or_insert(next)
                    })
                    .collect()
            })
            .collect();
        let n = tokenized.len();
        let mut df = vec![0u32; vocab.len()];
        let counts: Vec<Vec<(u32, u32)>> = tokenized
            .iter()
            .map(|toks| {
                let mut s = toks.clone();
                s.sort_unstable();
                let mut c: Vec<(u32, u32)> = Vec::new();
                for t in s {
                    match c.last_mut() {
                        Some((id, k)) if *id == t => *k += 1,
                        _ => c.push((t, 1)),
                    }
                }
                c.iter().for_each(|&(t, _)| df[t as usize] += 1);
                c
            })
            .collect();
        let idf: Vec<f64> = df
            .iter()
            .map(|&d| ((1.0 + n as f64) / (1.0 + f64::from(d))).ln() + 1.0)
            .collect();
        let docs = counts
            .into_iter()
            .zip(&tokenized)
            .map(|(c, toks)| {
                let mut v: Vec<(u32, f64)> = c
                    .into_iter()
                    .map(|(t, k)| (t, f64::from(k) * idf[t as usize]))
                    .collect();
                let norm = v.iter().map(|(_, x)| x * x).sum::<f64>().sqrt();
                if norm > 0.0 {
                    v.iter_mut().for_each(|(_, x)| *x /= norm);
                }
                let mut bigrams: Vec<u64> = toks
                    .windows(2)
                    .map(|w| (u64::from(w[0]) << 32) | u64::from(w[1]))
                    .collect();
                bigrams.sort_unstable();
                bigrams.dedup();
                Profile { tfidf: v, bigrams }
            })
            .collect();
        Lexical { docs, weights }
    }

    /// Number of pool documents (the query excluded).
    #[must_use]
    pub fn len(&self) -> usize {
        self.docs.len() - 1
    }

    /// True when the pool is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `LexSim` between documents `a` and `b` (index `len()` is the query).
    #[must_use]
    pub fn lexsim(&self, a: usize, b: usize) -> f64 {
        let (x, y) = (&self.docs[a], &self.docs[b]);
        self.weights[0] * sparse_dot(&x.tfidf, &y.tfidf) + self.weights[1] * jaccard(&x.bigrams, &y.bigrams)
    }
}

fn sparse_dot(a: &[(u32, f64)], b: &[(u32, f64)]) -> f64 {
    let (mut i, mut j, mut s) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                s += a[i].1 * b[j].1;
                i += 1;
                j += 1;
            }
        }
    }
    s
}

/// `|A ∩ B| / |A ∪ B|` of sorted, de-duplicated sets; 0 when both are empty.
fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - inter;
    if union == 0 {
        0.0
    } else {
        inter as f64 / union as f64
    }
}

impl Similarity for Lexical {
    fn rel(&self, x: usize) -> f64 {
        self.lexsim(x, self.len())
    }
    fn sim(&self, x: usize, y: usize) -> f64 {
        self.lexsim(x, y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_and_hand_computed_similarity() {
        assert_eq!(
            tokenize("Héllo, WORLD! x2-y_z"),
            vec!["héllo", "world", "x2", "y", "z"]
        );
        // Docs: "a b", "a c", query "a b". n = 3 documents.
        let l = Lexical::new(&["a b", "a c"], "a b", [0.5, 0.5]);
        let idf = |df: f64| (4.0f64 / (1.0 + df)).ln() + 1.0;
        let (ia, ib, ic) = (idf(3.0), idf(2.0), idf(1.0));
        // doc0 = (ia, ib)/|.|, doc1 = (ia, ic)/|.|: cosine = ia² / (|d0| |d1|)
        let cos01 = ia * ia / ((ia * ia + ib * ib).sqrt() * (ia * ia + ic * ic).sqrt());
        // bigrams {a b} vs {a c}: jaccard 0
        assert!((l.lexsim(0, 1) - 0.5 * cos01).abs() < 1e-12);
        // doc0 vs query: identical -> cos 1, jaccard 1
        assert!((l.rel(0) - 1.0).abs() < 1e-12);
        assert_eq!(jaccard(&[], &[]), 0.0);
        assert_eq!(jaccard(&[1, 2, 3], &[2, 3, 4]), 0.5);
    }
}
