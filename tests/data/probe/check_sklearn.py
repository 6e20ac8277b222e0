"""Checks `ctxprune probe --json OUT.json` against scikit-learn, end to end, on the folds
the report gives (each row's `fold`; ctxprune's rule matches GroupKFold only when
GroupKFold sorts tied group sizes stably, so the folds are read, not recomputed):

- GridSearchCV(Pipeline(StandardScaler, PolynomialFeatures(2, include_bias=False),
  Ridge), {"ridge__alpha": alphas}, cv=those folds, scoring="neg_mean_squared_error"):
  the per-fold and mean CV MSE of every alpha (unclipped predictions), the chosen alpha
  (ties to the first), and the refit on every row, whose predictions clipped to [0, 1]
  are y_hat and whose min-max scaling is z;
- the out-of-fold predictions at the chosen alpha, clipped (y_oof), and both R²;
- PCA1 of the standardised features (sign aligned with log_cum_obs_tokens);
- the fold-wise AUC of LogisticRegression(class_weight="balanced") on (x, z).

    python3 -m venv /tmp/skvenv && /tmp/skvenv/bin/pip install scikit-learn numpy
    cargo run -- probe --trajectories tests/data/probe/queries \
        --labels tests/data/probe/queries/labels.jsonl --json /tmp/probe.json
    /tmp/skvenv/bin/python tests/data/probe/check_sklearn.py /tmp/probe.json

Every printed difference should be below 1e-10, the alphas and the two AUCs equal.
"""
import json, sys, numpy as np
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler, PolynomialFeatures
from sklearn.linear_model import Ridge, LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.decomposition import PCA
from sklearn.metrics import roc_auc_score, r2_score
import sklearn

r = json.load(open(sys.argv[1]))
rows = r["rows"]
X = np.array([w["features"] for w in rows]); y = np.array([w["y"] for w in rows])
g = np.array([w["id"] for w in rows]); lab = np.array([w["rescued"] for w in rows]).astype(int)
k = r["options"]["folds"]
fold = np.array([w["fold"] for w in rows])
assert set(fold) <= set(range(k)), "a fold outside 0..k"
for q in set(g):
    assert len(set(fold[g == q])) == 1, f"query {q} is split across folds"
splits = [(np.where(fold != f)[0], np.where(fold == f)[0]) for f in range(k)]
# Informational: does this scikit-learn's GroupKFold give the same folds?
gkf = np.zeros(len(rows), int)
for i, (_, te) in enumerate(GroupKFold(n_splits=k).split(X, y, g)): gkf[te] = i
print(f"GroupKFold (scikit-learn {sklearn.__version__}) gives the same folds:", bool((gkf == fold).all()))

alphas = r["ridge"]["alphas"]
pipe = Pipeline([("scale", StandardScaler()), ("poly", PolynomialFeatures(2, include_bias=False)),
                 ("ridge", Ridge())])
gs = GridSearchCV(pipe, {"ridge__alpha": alphas}, cv=splits, scoring="neg_mean_squared_error").fit(X, y)
cv = gs.cv_results_
print("max |cv_mse diff|", np.max(np.abs(-cv["mean_test_score"] - np.array(r["ridge"]["cv_mse"]))))
fold_mse = np.array([[-cv[f"split{f}_test_score"][a] for f in range(k)] for a in range(len(alphas))])
ours = np.array([[np.nan if v is None else v for v in per] for per in r["ridge"]["fold_mse"]])
print("max |fold mse diff|", np.max(np.abs(fold_mse - ours)))
best = gs.best_params_["ridge__alpha"]
print("chosen alpha: sklearn", best, "ours", r["ridge"]["alpha"])
assert best == r["ridge"]["alpha"], "alphas differ"

yhat = np.clip(gs.best_estimator_.predict(X), 0, 1)
print("max |y_hat diff| (refit on all rows, clipped)", np.max(np.abs(yhat - np.array([w["y_hat"] for w in rows]))))
oof = np.zeros(len(y))
for tr, te in splits:
    m = Pipeline([("scale", StandardScaler()), ("poly", PolynomialFeatures(2, include_bias=False)),
                  ("ridge", Ridge(alpha=best))]).fit(X[tr], y[tr])
    oof[te] = np.clip(m.predict(X[te]), 0, 1)
print("max |y_oof diff|", np.max(np.abs(oof - np.array([w["y_oof"] for w in rows]))))
print("R² in sample: sklearn", r2_score(y, yhat), "ours", r["ridge"]["in_sample_r2"])
print("R² out of fold: sklearn", r2_score(y, oof), "ours", r["ridge"]["oof_r2"])

Z = StandardScaler().fit_transform(X)
p = PCA(1).fit(Z)
v = p.components_[0]; s = Z @ v
if np.corrcoef(s, X[:, 3])[0, 1] < 0: v, s = -v, -s
print("max |loading diff|", np.max(np.abs(v - np.array([l[1] for l in r["pca"]["loadings"]]))),
      "evr", p.explained_variance_ratio_[0], r["pca"]["explained_variance_ratio"])
print("max |x diff|", np.max(np.abs(s - np.array([w["x"] for w in rows]))))
z = (yhat - yhat.min()) / (yhat.max() - yhat.min())
print("max |z diff|", np.max(np.abs(z - np.array([w["z"] for w in rows]))))
P = np.c_[s, z]; aucs = []
for f, (tr, te) in enumerate(splits):
    if len(set(lab[te])) < 2 or len(set(lab[tr])) < 2: continue
    m = LogisticRegression(C=1.0, class_weight="balanced", solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(P[tr], lab[tr])
    aucs.append(roc_auc_score(lab[te], m.predict_proba(P[te])[:, 1]))
print("sklearn AUC", np.mean(aucs), len(aucs), "ours", r["auc"]["auc"], r["auc"]["valid_folds"])
