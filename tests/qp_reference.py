"""Independent reference: the SSVM primal as an explicit QP solved by scipy (SLSQP)."""
import numpy as np
from scipy.optimize import minimize


def random_explicit_problem(rng, n=3, m=4, d=5):
    psi, losses = [], []
    for _ in range(n):
        p = rng.normal(size=(m, d))
        p[0] = 0.0
        l = np.r_[0.0, rng.uniform(0.2, 1.0, size=m - 1)]
        psi.append(p)
        losses.append(l)
    return psi, losses


def qp_optimum(psi, losses, lam, box=None):
    """min_{w in box, xi} lam/2 |w|^2 + 1/n sum xi_i  s.t. xi_i >= L_i(y) - <w, psi_i(y)>."""
    n, d = len(psi), psi[0].shape[1]

    def f(x):
        return 0.5 * lam * x[:d] @ x[:d] + x[d:].sum() / n

    def grad(x):
        return np.r_[lam * x[:d], np.full(n, 1.0 / n)]

    rows, rhs = [], []
    for i in range(n):
        for y in range(psi[i].shape[0]):
            a = np.zeros(d + n)
            a[:d] = psi[i][y]
            a[d + i] = 1.0
            rows.append(a)
            rhs.append(losses[i][y])
    A, b = np.array(rows), np.array(rhs)
    cons = [{"type": "ineq", "fun": lambda x: A @ x - b, "jac": lambda x: A}]
    bounds = [(None, None)] * (d + n)
    if box is not None:
        idx, lo, hi = box
        for j, l, u in zip(idx, lo, hi):
            bounds[j] = (None if np.isinf(l) else l, None if np.isinf(u) else u)
    x0 = np.r_[np.zeros(d), np.array([max(l) for l in losses])]
    if box is not None:
        for j, (l, u) in enumerate(bounds[:d]):
            x0[j] = min(max(0.0, l if l is not None else 0.0), u if u is not None else 0.0) if (l or u) else 0.0
    res = minimize(f, x0, jac=grad, constraints=cons, bounds=bounds, method="SLSQP",
                   options={"ftol": 1e-15, "maxiter": 1000})
    assert res.success, res.message
    return res.fun, res.x[:d]
