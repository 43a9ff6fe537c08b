"""Compiled kernels of the HDP-GMM: the sweep's sequential part, inserts, retrieval (numba, compiled on first use).

:func:`block_moves` walks a block's points in order (:func:`metamod.memory.hdp.sweep.sweep_block`): each point's
full conditional from the block's quadratic forms ``Q``, log densities ``F`` and log weights ``LW`` (own component
by the leave-one-out identity), an inverse-CDF draw with the point's pre-drawn uniform, and for a move between
existing components the rank-1 statistics, precision (Sherman-Morrison) and determinant updates of both components
plus the O(D) update of the rest of the block's ``Q`` / ``F`` rows. It stops and hands the point back to Python
(:meth:`metamod.memory.hdp.sweep._Block._apply`) for everything rarer: a draw of a new component (birth or beta
re-split: those use the model's random generator), a component emptied or an ill-conditioned downdate; before a
change of a slot due for refactorisation it returns ``REFRESH`` (the caller refactorises those slots from their
statistics and re-enters at the same point). During a fit it also logs each move's two rank-1 changes for the form
cache, and :func:`replay_forms_compiled` replays them onto a block's carried forms
(:mod:`metamod.memory.hdp.forms`).

The online inserts (:func:`insert_rows_compiled`, :mod:`metamod.memory.hdp.online`), the quadratic features and
packed coefficients (:mod:`metamod.memory.hdp.stats`) and the retrieval scores (:mod:`metamod.memory.hdp.query`:
ranking, and one call for a few queries) are compiled the same way.

These are the only implementations in the package. The tests keep a numpy reference of every kernel
(``tests/_hdp_reference.py``, the former numpy paths) and check that the compiled chain, with the same uniforms,
equals the reference chain in float64 (retrieval weights to rounding, features bit for bit).
"""

from __future__ import annotations

import math

import numpy as np

_COMPILED: dict[str, object] = {}

DONE, HANDBACK, REFRESH = 0, 1, 2  # REFRESH: refactorise every slot with updates >= refresh_every, re-enter
PENDING = 8  # rank-1 changes a slot keeps pending in the compiled inserts (:func:`_insert_rows`)
LOG_PI = math.log(math.pi)


def _t_consts(kappa, nu, logdet_psi, D):
    """Student-t ``(df, c, log_norm)`` of one component (as :func:`metamod.memory.hdp.stats.student_t_consts`)."""
    df = nu - D + 1.0
    c = (kappa + 1.0) / (kappa * df)
    ln = (
        math.lgamma(0.5 * (df + D))
        - math.lgamma(0.5 * df)
        - 0.5 * D * (math.log(df) + LOG_PI)
        - 0.5 * (logdet_psi + D * math.log(c))
    )
    return df, c, ln


def _rank1_moments(k, w, x, h, kappa0, n, S1, mu, logdet, updates, stale):
    """The O(D) part of adding ``x`` with weight ``w`` to slot ``k``: ``n``, ``S1``, ``log det += log h``, mean."""
    D = x.shape[0]
    n[k] += w
    for a in range(D):
        S1[k, a] += w * x[a]
    logdet[k] += math.log(h)
    kap_k = kappa0 + n[k]
    for a in range(D):
        mu[k, a] = S1[k, a] / kap_k
    updates[k] += 1
    stale[k] = True


def _rank1_apply(k, w, x, g, s_h, h, kappa0, n, S1, S2, mu, prec, logdet, updates, stale):
    """Add ``x`` with weight ``w`` to slot ``k``: :func:`_rank1_moments`, ``S2 += w x x^T``, ``P -= s_h g g^T``."""
    D = x.shape[0]
    _rank1_moments(k, w, x, h, kappa0, n, S1, mu, logdet, updates, stale)
    for a in range(D):
        for b in range(D):
            S2[k, a, b] += w * x[a] * x[b]
            prec[k, a, b] -= s_h * g[a] * g[b]


def _block_moves(
    Q, F, LW, Y, z, doms, logf0, u, rows, labels, start, stop, K,
    n, S1, S2, mu, prec, logdet, updates, stale, ndk, beta, beta_u,
    df, c, ln, alpha, gamma, flat, kappa0, nu0, refresh_every, log_rows, log_row, log_g, log_scal, log_n,
):  # fmt: skip
    """Process block positions ``[start, stop)``; returns ``(position, code, pick, moves)`` (see module doc).
    Each move appends its two rank-1 changes to the log ``(log_row, log_g, log_scal)`` at ``log_n[0]``, as the
    slots' rows ``log_rows[slot]`` (room for two per position reserved by the caller; an empty ``log_g`` logs
    nothing: :mod:`metamod.memory.hdp.forms`)."""
    B, D = Y.shape
    p = np.empty(K + 1)
    g_old = np.empty(D)
    g_new = np.empty(D)
    moves = 0
    for j in range(start, stop):
        a = z[j]
        d = doms[j]
        na = n[a]
        single = na <= 1.0 + 1e-9
        kap = kappa0 + na
        s_loo = kap / (kap - 1.0)
        one_minus = max(1.0 - s_loo * Q[a, j], 1e-300)
        q_loo = s_loo * s_loo * Q[a, j] / one_minus
        df_m, c_m, ln_m = _t_consts(kap - 1.0, nu0 + na - 1.0, logdet[a] + math.log(one_minus), D)
        f_own = ln_m - 0.5 * (df_m + D) * math.log1p(max(q_loo, 0.0) / (c_m * df_m))
        if flat:
            w_own = -1.0
            for dd in range(ndk.shape[0]):
                w_own += ndk[dd, a]
            l_new = math.log(gamma) + logf0[j]
            row = 0
        else:
            w_own = 0.0 if single else ndk[d, a] - 1.0 + alpha * beta[a]
            l_new = math.log(alpha * (beta_u[0] + (beta[a] if single else 0.0))) + logf0[j]
            row = d
        l_own = (math.log(w_own) if w_own > 0.0 else -np.inf) + f_own
        mx = max(l_own, l_new)
        for k in range(K):
            if k != a:
                v = LW[row, k] + F[k, j]
                if v > mx:
                    mx = v
        total = 0.0
        for k in range(K):
            v = l_own if k == a else LW[row, k] + F[k, j]
            total += math.exp(v - mx)
            p[k] = total
        total += math.exp(l_new - mx)
        p[K] = total
        target = u[j] * total
        pick = K
        for k in range(K + 1):
            if not p[k] < target:
                pick = k
                break
        if pick == a or (flat and single and pick == K):
            continue
        if pick == K:
            return j, HANDBACK, pick, moves
        old, new = a, pick
        if n[old] - 1.0 < 1e-9:
            return j, HANDBACK, pick, moves
        if updates[old] >= refresh_every or updates[new] >= refresh_every:
            return j, (REFRESH if refresh_every > 0 else HANDBACK), pick, moves
        # rank-1 records of both changes (w = -1 on old, +1 on new), before any statistic moves
        kap_o, kap_n = kappa0 + n[old], kappa0 + n[new]
        a_o = 0.0
        a_n = 0.0
        gmu_o = 0.0
        gmu_n = 0.0
        g_old[:] = np.dot(prec[old], Y[j] - mu[old])
        g_new[:] = np.dot(prec[new], Y[j] - mu[new])
        for i in range(D):
            a_o += (Y[j, i] - mu[old, i]) * g_old[i]
            a_n += (Y[j, i] - mu[new, i]) * g_new[i]
            gmu_o += g_old[i] * mu[old, i]
            gmu_n += g_new[i] * mu[new, i]
        s_o = -kap_o / (kap_o - 1.0)
        s_n = kap_n / (kap_n + 1.0)
        h_o = 1.0 + s_o * a_o
        h_n = 1.0 + s_n * a_n
        if h_o <= 1e-8:
            return j, HANDBACK, pick, moves
        sh_o, sh_n = s_o / h_o, s_n / h_n
        r_o, r_n = -1.0 / (kap_o - 1.0), 1.0 / (kap_n + 1.0)
        if log_g.shape[0] > 0:
            e = log_n[0]
            log_row[e], log_row[e + 1] = log_rows[old], log_rows[new]
            for i in range(D):
                log_g[e, i] = g_old[i]
                log_g[e + 1, i] = g_new[i]
            log_scal[e, 0], log_scal[e, 1], log_scal[e, 2], log_scal[e, 3] = gmu_o, r_o, a_o, sh_o
            log_scal[e + 1, 0], log_scal[e + 1, 1], log_scal[e + 1, 2], log_scal[e + 1, 3] = gmu_n, r_n, a_n, sh_n
            log_n[0] = e + 2
        for k, w, g, sh, h in ((old, -1.0, g_old, sh_o, h_o), (new, 1.0, g_new, sh_n, h_n)):
            _rank1_apply(k, w, Y[j], g, sh, h, kappa0, n, S1, S2, mu, prec, logdet, updates, stale)
            kap_k = kappa0 + n[k]
            df[k], c[k], ln[k] = _t_consts(kap_k, nu0 + n[k], logdet[k], D)
        ndk[d, old] -= 1
        ndk[d, new] += 1
        for k in (old, new):
            for dd in range(LW.shape[0]):
                if flat:
                    tot = 0.0
                    for e in range(ndk.shape[0]):
                        tot += ndk[e, k]
                    LW[0, k] = math.log(tot) if tot > 0 else -np.inf
                else:
                    v = ndk[dd, k] + alpha * beta[k]
                    LW[dd, k] = math.log(v) if v > 0 else -np.inf
        if j + 1 < B:
            T_o = np.dot(Y[j + 1 :], g_old)
            T_n = np.dot(Y[j + 1 :], g_new)
        for r in range(j + 1, B):
            t_o = T_o[r - j - 1] - gmu_o
            t_n = T_n[r - j - 1] - gmu_n
            v_o = t_o - r_o * a_o
            v_n = t_n - r_n * a_n
            Q[old, r] = Q[old, r] - 2.0 * r_o * t_o + r_o * r_o * a_o - sh_o * v_o * v_o
            Q[new, r] = Q[new, r] - 2.0 * r_n * t_n + r_n * r_n * a_n - sh_n * v_n * v_n
            F[old, r] = ln[old] - 0.5 * (df[old] + D) * math.log1p(max(Q[old, r], 0.0) / (c[old] * df[old]))
            F[new, r] = ln[new] - 0.5 * (df[new] + D) * math.log1p(max(Q[new, r], 0.0) / (c[new] * df[new]))
        z[j] = new
        labels[rows[j]] = new
        moves += 1
    return stop, DONE, -1, moves


def _apply_pending(k, m, pend_g, pend_s, pend_x, pend_w, prec, S2, u, g):
    """Apply slot ``k``'s ``m`` pending rank-1 changes in one pass over its matrices: ``P -= sum_j s_j g_j g_j^T``
    and ``S2 += sum_j w_j x_j x_j^T``, four changes per pass over a row (entries ``m`` up to the next multiple of
    four are zeroed first); with a non-empty ``u`` the same pass computes ``g = P u`` from the updated rows (the
    next change's record). Each row is updated in L1 and used at once, so the two D x D matrices are read and
    written once per ``m`` changes instead of once per change."""
    D = prec.shape[1]
    top = (m + 3) // 4 * 4
    for j in range(m, top):  # the padding of the last group of four: zero changes
        pend_s[k, j] = 0.0
        pend_w[k, j] = 0.0
        for a in range(D):
            pend_g[k, j, a] = 0.0
            pend_x[k, j, a] = 0.0
    P, S, Gs, Xs = prec[k], S2[k], pend_g[k], pend_x[k]
    gemv = u.shape[0] > 0
    for a in range(D):
        for j in range(0, top, 4):
            c0, c1 = pend_s[k, j] * Gs[j, a], pend_s[k, j + 1] * Gs[j + 1, a]
            c2, c3 = pend_s[k, j + 2] * Gs[j + 2, a], pend_s[k, j + 3] * Gs[j + 3, a]
            g0, g1, g2, g3 = Gs[j], Gs[j + 1], Gs[j + 2], Gs[j + 3]
            for b in range(D):
                P[a, b] -= c0 * g0[b] + c1 * g1[b] + c2 * g2[b] + c3 * g3[b]
            e0, e1 = pend_w[k, j] * Xs[j, a], pend_w[k, j + 1] * Xs[j + 1, a]
            e2, e3 = pend_w[k, j + 2] * Xs[j + 2, a], pend_w[k, j + 3] * Xs[j + 3, a]
            x0, x1, x2, x3 = Xs[j], Xs[j + 1], Xs[j + 2], Xs[j + 3]
            for b in range(D):
                S[a, b] += e0 * x0[b] + e1 * x1[b] + e2 * x2[b] + e3 * x3[b]
        if gemv:
            acc = 0.0
            for b in range(D):
                acc += P[a, b] * u[b]
            g[a] = acc


def _insert_rows(
    Q, Xc, doms, logf0, u, start, labels, first_row, K,
    n, S1, S2, mu, prec, logdet, updates, stale, ndk, mdk, beta, beta_u,
    df, c, ln, alpha, gamma, flat, kappa0, nu0, refresh_every,
    threshold, tau_new, fold_min, comp, rho, touched,
):  # fmt: skip
    """Online inserts of batch rows ``[start, B)`` as :meth:`metamod.memory.hdp.online._Batch.insert` does them;
    returns ``(row, code)``: ``DONE``, ``HANDBACK`` at a birth or a row whose fold-in is ill-conditioned (that row
    goes through ``_Batch.insert``), or ``REFRESH`` before a row that changes a slot due for refactorisation.

    A fold-in's record ``g = P u`` needs the precision current; the two D x D rank-1 updates themselves (precision
    and ``S2``) are kept pending, up to :data:`PENDING` per slot: ``g = P u - sum_j s_j g_j (g_j . u)`` over the
    pending ones, and when the slot's list is full one pass applies them all and computes ``g``
    (:func:`_apply_pending`). Everything pending is applied before the kernel returns."""
    B, D = Xc.shape
    p = np.empty(K + 1)
    G = np.empty((K, D))
    A = np.empty(K)
    H = np.empty(K)
    uk = np.empty(D)
    none = np.empty(0)
    M = PENDING
    pend_g = np.empty((K, M, D))  # not zeroed: a few hundred kB per call (the padding is zeroed where used)
    pend_s = np.empty((K, M))
    pend_w = np.empty((K, M))
    pend_x = np.empty((K, M, D))
    pend_n = np.zeros(K, dtype=np.int64)
    i = start
    code = DONE
    while i < B:
        d = doms[i]
        for k in range(K):
            if flat:
                w = 0.0
                for e in range(ndk.shape[0]):
                    w += ndk[e, k]
            else:
                w = ndk[d, k] + alpha * beta[k]
            f = ln[k] - 0.5 * (df[k] + D) * math.log1p(max(Q[k, i], 0.0) / (c[k] * df[k]))
            p[k] = math.log(max(w, 1e-300)) + f
        p[K] = math.log(gamma if flat else alpha * beta_u) + logf0[i]
        mx = p[0]
        for k in range(1, K + 1):
            mx = max(mx, p[k])
        total = 0.0
        for k in range(K + 1):
            p[k] = math.exp(p[k] - mx)
            total += p[k]
        for k in range(K + 1):
            p[k] /= total
        rho_new = p[K]
        if (threshold and rho_new > tau_new) or (not threshold and u[i, 0] < rho_new):
            code = HANDBACK
            break
        old_total = 0.0
        for k in range(K):
            old_total += p[k]
        best, best_r = 0, -1.0
        ok = True
        due = False
        for k in range(K):  # is any slot this row changes due for refactorisation?
            r = p[k] / old_total
            if r > best_r:
                best, best_r = k, r
            if r >= fold_min and updates[k] >= refresh_every:
                due = True
        if due:
            code = REFRESH if refresh_every > 0 else HANDBACK
            break
        for k in range(K):  # the rank-1 records of every fold-in, before anything moves
            r = p[k] / old_total
            if r < fold_min:
                continue
            for a in range(D):
                uk[a] = Xc[i, a] - mu[k, a]
            m = pend_n[k]
            if m == M:
                _apply_pending(k, m, pend_g, pend_s, pend_x, pend_w, prec, S2, uk, G[k])
                pend_n[k] = 0
            else:
                G[k] = np.dot(prec[k], uk)
                for j in range(m):
                    t = pend_s[k, j] * np.dot(pend_g[k, j], uk)
                    for a in range(D):
                        G[k, a] -= t * pend_g[k, j, a]
            A[k] = np.dot(uk, G[k])
            kap = kappa0 + n[k]
            H[k] = 1.0 + kap * r / (kap + r) * A[k]
            if H[k] <= 1e-8:
                ok = False
        if not ok:
            code = HANDBACK
            break
        for k in range(K):
            r = p[k] / old_total
            if r < fold_min:
                continue
            kap = kappa0 + n[k]
            s_h = kap * r / (kap + r) / H[k]
            r_mu = r / (kap + r)
            gmu = np.dot(G[k], mu[k])
            m = pend_n[k]
            pend_g[k, m] = G[k]
            pend_s[k, m] = s_h
            pend_w[k, m] = r
            pend_x[k, m] = Xc[i]
            pend_n[k] = m + 1
            _rank1_moments(k, r, Xc[i], H[k], kappa0, n, S1, mu, logdet, updates, stale)
            kap_k = kappa0 + n[k]
            touched[k] = True
            df[k], c[k], ln[k] = _t_consts(kap_k, nu0 + n[k], logdet[k], D)
            if i + 1 < B:
                T = np.dot(Xc[i + 1 :], G[k])
                for q in range(i + 1, B):
                    t = T[q - i - 1] - gmu
                    v = t - r_mu * A[k]
                    Q[k, q] = Q[k, q] - 2.0 * r_mu * t + r_mu * r_mu * A[k] - s_h * v * v
        ndk[d, best] += 1
        labels[first_row + i] = best
        if not flat:  # local table: a new one w.p. alpha beta_z / (alpha beta_z + n_{d,z} before this row)
            ab, before = alpha * beta[best], ndk[d, best] - 1
            if before == 0 or u[i, 1] < ab / (ab + before):
                mdk[d, best] += 1
        comp[i] = best
        rho[i] = rho_new
        i += 1
    for k in range(K):
        if pend_n[k] > 0:
            _apply_pending(k, pend_n[k], pend_g, pend_s, pend_x, pend_w, prec, S2, none, none)
    return i, code


def _features_row(x, offsets, phi):
    """Quadratic features of one row ``x`` into ``phi`` (:func:`metamod.memory.hdp.stats.quad_features`: the
    products ``x_i x_j`` in the row's dtype, so numpy's bits)."""
    D = x.shape[0]
    npair = offsets[D]
    for i in range(D):
        xi = x[i]
        seg = phi[offsets[i] : offsets[i + 1]]
        tail = x[i:]
        for j in range(D - i):  # one contiguous run per triangle row: vectorises
            seg[j] = xi * tail[j]
    for i in range(D):
        phi[npair + i] = x[i]
    phi[npair + D] = 1.0


def _quad_features_rows(X, offsets, out):
    """:func:`_features_row` for every row of ``X`` into the rows of ``out``."""
    for r in range(X.shape[0]):
        _features_row(X[r], offsets, out[r])


def _nearest(x, C, csq):
    """Nearest centroid row of ``C`` to ``x``: argmin of ``|c|^2 - 2 c . x`` (first on ties)."""
    best, best_v = 0, np.inf
    for d in range(C.shape[0]):
        v = csq[d] - 2.0 * np.dot(C[d], x)
        if v < best_v:
            best, best_v = d, v
    return best


def _log_weights(ndk, beta, alpha, flat, K):
    """(domains or 1, K) log mixture weights ``log(n_{d,k} + alpha beta_k)`` (flat: one row, ``log N_k``)."""
    if flat:
        out = np.empty((1, K))
        for k in range(K):
            w = 0.0
            for e in range(ndk.shape[0]):
                w += ndk[e, k]
            out[0, k] = math.log(max(w, 1e-300))
        return out
    out = np.empty((ndk.shape[0], K))
    for d in range(ndk.shape[0]):
        for k in range(K):
            out[d, k] = math.log(ndk[d, k] + alpha * beta[k])
    return out


def _rank_row(q, log_w, df, c, ln, D, top, order, weights, lg):
    """Rank the components for one query with quadratic forms ``q`` (K,) and log mixture weights ``log_w`` (K,):
    logits ``log_w[k] + log t_k(q)``, softmax weights, and the ``top`` largest, best first (ties: lower k first),
    into ``order`` / ``weights`` (the order :func:`metamod.memory.hdp.query.rank_logits` gives); ``lg``: (K,)
    scratch."""
    K = q.shape[0]
    mx = -np.inf
    for k in range(K):
        v = log_w[k] + ln[k] - 0.5 * (df[k] + D) * math.log1p(max(float(q[k]), 0.0) / (c[k] * df[k]))
        lg[k] = v
        mx = max(mx, v)
    total = 0.0
    for k in range(K):
        lg[k] = math.exp(lg[k] - mx)
        total += lg[k]
    m = 0
    for k in range(K):  # insertion into the sorted top list: only a strictly larger weight moves ahead (stable)
        w = lg[k] / total
        if m == top and w <= weights[m - 1]:
            continue
        pos = m if m < top else top - 1
        while pos > 0 and weights[pos - 1] < w:
            weights[pos] = weights[pos - 1]
            order[pos] = order[pos - 1]
            pos -= 1
        weights[pos] = w
        order[pos] = k
        if m < top:
            m += 1


def _rank_rows(q, doms, ndk, beta, alpha, flat, df, c, ln, D, top, order, weights):
    """:func:`_rank_row` for every query row ``b`` of the (n, K) quadratic forms ``q`` (domain ``doms[b]``; 0 for
    a flat model, whose log weights are one row)."""
    lg = np.empty(q.shape[1])
    log_w = _log_weights(ndk, beta, alpha, flat, q.shape[1])
    for b in range(q.shape[0]):
        _rank_row(q[b], log_w[doms[b]], df, c, ln, D, top, order[b], weights[b], lg)


def _retrieve_rows(Q, mu0, C, csq, doms, ndk, beta, alpha, flat, coef, offsets, df, c, ln, top, order, weights):
    """Predictive retrieval of a few queries ``Q`` (n, D), one at a time in one call: domain (``doms[b] < 0``:
    nearest centroid), quadratic features, one matrix-vector product with the packed coefficients ``coef``
    (K, F) in their dtype, ranking (:func:`_rank_row`)."""
    n, D = Q.shape
    K, F = coef.shape
    phi = np.empty(F, dtype=coef.dtype)
    xc = np.empty(D, dtype=coef.dtype)
    lg = np.empty(K)
    log_w = _log_weights(ndk, beta, alpha, flat, K)
    for b in range(n):
        d = doms[b] if doms[b] >= 0 else _nearest(Q[b], C, csq)
        for a in range(D):
            xc[a] = Q[b, a] - mu0[a]
        _features_row(xc, offsets, phi)
        q = np.dot(coef, phi)
        _rank_row(q, log_w[d], df, c, ln, D, top, order[b], weights[b], lg)


def _pack_coefficients(slots, prec, mu, offsets, coef):
    """Packed quadratic-form coefficients ``[P_ij (x2 off the diagonal), -2 P mu, mu^T P mu]`` of ``slots`` into
    the rows of ``coef`` (:meth:`metamod.memory.hdp.stats.NIWComponents.coefficients`)."""
    D = mu.shape[1]
    npair = offsets[D]
    for k in slots:
        row = coef[k]
        P = prec[k]
        for i in range(D):  # one contiguous run per triangle row (vectorises): 2 P_ij, then the diagonal P_ii
            seg = row[offsets[i] : offsets[i + 1]]
            src = P[i, i:]
            for j in range(D - i):
                seg[j] = 2.0 * src[j]
            seg[0] = P[i, i]
        pmu = np.dot(prec[k], mu[k])  # BLAS: a scalar loop here was latency-bound (~30 us per slot at D = 128)
        const = 0.0
        for i in range(D):
            row[npair + i] = -2.0 * pmu[i]
            const += pmu[i] * mu[k, i]
        row[npair + D] = const


def _replay_forms(values, start, T, rows, scal):
    """Add each logged change's update of the quadratic forms (``T[e]``: ``g_e . y`` of the block's rows) to row
    ``rows[e]`` of ``values`` from column ``start`` (:mod:`metamod.memory.hdp.forms`)."""
    E, B = T.shape
    for e in range(E):
        row = values[rows[e], start : start + B]
        te = T[e]
        g_mu, r, a, s_h = scal[e, 0], scal[e, 1], scal[e, 2], scal[e, 3]
        w = g_mu + r * a  # q' - q = r^2 a - 2 r (x - g_mu) - s_h (x - w)^2 for x = g . y
        const = r * r * a + 2.0 * r * g_mu
        for b in range(B):
            x = np.float64(te[b])
            v = x - w
            row[b] += const - 2.0 * r * x - s_h * v * v


def replay_forms_compiled(*args):
    """:func:`_replay_forms` compiled by numba (on first call)."""
    return _compiled("replay_forms", _replay_forms)(*args)


def pack_coefficients_compiled(*args):
    """:func:`_pack_coefficients` compiled by numba (on first call)."""
    return _compiled("pack_coefficients", _pack_coefficients)(*args)


def quad_features_compiled(*args):
    """:func:`_quad_features_rows` compiled by numba (on first call)."""
    return _compiled("quad_features", _quad_features_rows)(*args)


def rank_rows_compiled(*args):
    """:func:`_rank_rows` compiled by numba (on first call)."""
    return _compiled("rank_rows", _rank_rows)(*args)


def retrieve_rows_compiled(*args):
    """:func:`_retrieve_rows` compiled by numba (on first call)."""
    return _compiled("retrieve_rows", _retrieve_rows)(*args)


def insert_rows_compiled(*args):
    """:func:`_insert_rows` compiled by numba (on first call)."""
    return _compiled("insert_rows", _insert_rows)(*args)


def block_moves(*args):
    """:func:`_block_moves` compiled by numba (on first call)."""
    return _compiled("block_moves", _block_moves)(*args)


# reassociated sums (vectorised reductions): the pending-change pass's ``P u`` is 4x faster; rounding-level changes
_FASTMATH = {"_apply_pending": {"reassoc", "contract"}}
_HELPERS = (
    "_t_consts",
    "_rank1_moments",
    "_rank1_apply",
    "_apply_pending",
    "_features_row",
    "_nearest",
    "_log_weights",
    "_rank_row",
)


def _compiled(name: str, fn):
    """``fn`` compiled by numba once per process (cached on disk where the package folder is writable); the
    helpers the kernels call (:data:`_HELPERS`) are compiled first and replace their module globals (numba resolves
    them as globals). numba is imported here, on first use, so importing the package stays cheap."""
    if name not in _COMPILED:
        import numba

        for helper in _HELPERS:
            if helper not in _COMPILED:
                flags = _FASTMATH.get(helper, False)
                _COMPILED[helper] = globals()[helper] = numba.njit(cache=True, nogil=True, fastmath=flags)(
                    globals()[helper]
                )
        _COMPILED[name] = numba.njit(cache=True, nogil=True)(fn)
    return _COMPILED[name]
