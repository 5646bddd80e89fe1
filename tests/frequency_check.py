"""The chi-square goodness-of-fit p-value of drawn outcomes against exact probabilities, shared by the sampling
tests (chains, segments, spans, trees).

Pearson's statistic is chi-square distributed only when every expected count is large; with thousands of
outcomes of expected count ~0.01 (a segmentation space of 1,566 at 30,000 draws) its p-values fall far below
uniform for an exact sampler, and a fixed threshold then fails at random. Cochran's rule: outcomes expected fewer
than 5 times are pooled into one cell (and that cell kept only when it is expected 5 times or more)."""
import numpy as np
from scipy.stats import chisquare

MIN_EXPECTED = 5.0


def pooled_pvalue(observed, probabilities, draws: int) -> float:
    """p-value of `observed` counts (m,) against `draws` x `probabilities` (m,; summing to 1 up to rounding),
    outcomes of expected count < MIN_EXPECTED pooled. Asserts that no outcome of probability 0 was drawn."""
    observed = np.asarray(observed, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    assert observed.shape == p.shape, (observed.shape, p.shape)
    assert observed[p == 0].sum() == 0, "an outcome of probability 0 was drawn"
    assert observed.sum() == draws, (observed.sum(), draws)
    expected = p / p.sum() * draws
    big = expected >= MIN_EXPECTED
    obs, exp = list(observed[big]), list(expected[big])
    rest = expected[~big].sum()
    if rest >= MIN_EXPECTED:
        obs.append(observed[~big].sum())
        exp.append(rest)
    else:                      # too little mass to test on its own: folded into the least likely tested outcome
        i = int(np.argmin(exp))
        obs[i] += observed[~big].sum()
        exp[i] += rest
    assert len(obs) >= 2, "fewer than two testable cells: draw more"
    return float(chisquare(obs, exp).pvalue)
