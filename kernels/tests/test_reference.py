"""The two float64 references agree (recurrent vs chunked) and decode is one recurrent step."""
import numpy as np
import pytest

from kernels.kda.reference import naive_chunk_kda, naive_decode_kda, naive_recurrent_kda


def inputs(B, T, H, HV, K, V, seed=0, strong_decay=False):
    r = np.random.default_rng(seed)
    q, k = r.standard_normal((B, T, H, K)), r.standard_normal((B, T, H, K))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = r.standard_normal((B, T, HV, V))
    g = np.log(r.uniform(0.01 if strong_decay else 0.5, 1, (B, T, HV, K)))
    beta = r.uniform(0, 1, (B, T, HV))
    h0 = r.standard_normal((B, HV, K, V))
    return q, k, v, g, beta, h0


@pytest.mark.parametrize("B,T,H,HV,K,V", [(1, 1, 1, 1, 8, 8), (2, 63, 1, 2, 12, 10), (1, 64, 2, 2, 16, 16),
                                          (1, 150, 1, 2, 7, 9), (2, 257, 2, 4, 16, 12)],
                         ids=lambda x: str(x))
def test_chunked_equals_recurrent(B, T, H, HV, K, V):
    q, k, v, g, beta, h0 = inputs(B, T, H, HV, K, V)
    o1, s1 = naive_recurrent_kda(q, k, v, g, beta, initial_state=h0)
    o2, s2 = naive_chunk_kda(q, k, v, g, beta, initial_state=h0)
    np.testing.assert_allclose(o2, o1, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(s2, s1, rtol=1e-10, atol=1e-10)


def test_chunked_is_stable_under_strong_decay():
    q, k, v, g, beta, h0 = inputs(1, 200, 1, 1, 8, 8, strong_decay=True)
    g *= 20  # up to ~-90 per token: exp(G) alone would underflow within a chunk
    o1, s1 = naive_recurrent_kda(q, k, v, g, beta, initial_state=h0)
    o2, s2 = naive_chunk_kda(q, k, v, g, beta, initial_state=h0)
    assert np.isfinite(o2).all()
    np.testing.assert_allclose(o2, o1, rtol=1e-9, atol=1e-9)


def test_decode_is_one_recurrent_step_on_the_pool():
    q, k, v, g, beta, _ = inputs(3, 1, 1, 2, 8, 6)
    r = np.random.default_rng(1)
    pool = r.standard_normal((5, 2, 8, 6))
    slots = np.array([4, 0, 2])
    o, new_pool = naive_decode_kda(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, slots)
    o_ref, s_ref = naive_recurrent_kda(q, k, v, g, beta, initial_state=pool[slots])
    np.testing.assert_allclose(o, o_ref[:, 0])
    np.testing.assert_allclose(new_pool[slots], s_ref)
    np.testing.assert_array_equal(new_pool[[1, 3]], pool[[1, 3]])
