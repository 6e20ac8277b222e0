"""Checks `ctxprune probe --json OUT.json` against scikit-learn, end to end: the folds
(GroupKFold), the CV MSE of every alpha and the out-of-fold predictions of
Pipeline(StandardScaler, PolynomialFeatures(2, include_bias=False), Ridge(alpha)) with
predictions clipped to [0, 1], PCA1 of the standardised features (sign aligned with
log_cum_obs_tokens), and the fold-wise AUC of LogisticRegression(class_weight="balanced").

    python3 -m venv /tmp/skvenv && /tmp/skvenv/bin/pip install scikit-learn numpy
    cargo run -- probe --trajectories tests/data/probe/queries \
        --labels tests/data/probe/queries/labels.jsonl --json /tmp/probe.json
    /tmp/skvenv/bin/python tests/data/probe/check_sklearn.py /tmp/probe.json

Every printed difference should be below 1e-10 and the two AUCs equal.
"""
import json, sys, numpy as np
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler, PolynomialFeatures
from sklearn.linear_model import Ridge, LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.decomposition import PCA
from sklearn.metrics import roc_auc_score
r = json.load(open(sys.argv[1]))
rows = r["rows"]
X = np.array([w["features"] for w in rows]); y = np.array([w["y"] for w in rows])
g = np.array([w["id"] for w in rows]); lab = np.array([w["rescued"] for w in rows]).astype(int)
k = r["options"]["folds"]
fold = np.zeros(len(rows), int)
for i, (tr, te) in enumerate(GroupKFold(n_splits=k).split(X, y, g)): fold[te] = i
assert (fold == np.array([w["fold"] for w in rows])).all(), "folds differ"
mses = []
for a in r["ridge"]["alphas"]:
    oof = np.zeros(len(y))
    for f in range(k):
        tr, te = fold != f, fold == f
        m = make_pipeline(StandardScaler(), PolynomialFeatures(2, include_bias=False), Ridge(alpha=a)).fit(X[tr], y[tr])
        oof[te] = np.clip(m.predict(X[te]), 0, 1)
    mses.append(np.mean((oof - y) ** 2))
    if a == r["ridge"]["alpha"]: best = oof
print("max |cv_mse diff|", np.max(np.abs(np.array(mses) - np.array(r["ridge"]["cv_mse"]))))
print("max |oof diff|", np.max(np.abs(best - np.array([w["y_hat"] for w in rows]))))
Z = StandardScaler().fit_transform(X)
p = PCA(1).fit(Z)
v = p.components_[0]; s = Z @ v
if np.corrcoef(s, X[:, 3])[0, 1] < 0: v, s = -v, -s
print("max |loading diff|", np.max(np.abs(v - np.array([l[1] for l in r["pca"]["loadings"]]))),
      "evr", p.explained_variance_ratio_[0], r["pca"]["explained_variance_ratio"])
print("max |x diff|", np.max(np.abs(s - np.array([w["x"] for w in rows]))))
z = (best - best.min()) / (best.max() - best.min())
P = np.c_[s, z]; aucs = []
for f in range(k):
    tr, te = fold != f, fold == f
    if len(set(lab[te])) < 2 or len(set(lab[tr])) < 2: continue
    m = LogisticRegression(C=1.0, class_weight="balanced", solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(P[tr], lab[tr])
    aucs.append(roc_auc_score(lab[te], m.predict_proba(P[te])[:, 1]))
print("sklearn AUC", np.mean(aucs), len(aucs), "ours", r["auc"]["auc"], r["auc"]["valid_folds"])
