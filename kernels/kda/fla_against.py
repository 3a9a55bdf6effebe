"""FLA's own KDA on our argument order, for `bench --against fla` (a side-by-side number on a GPU).
The contracts name these (`AGAINST`); the bench's sandboxed worker imports this file by path."""


def kda_decode(q, k, v, g, beta, state, slots, o):
    from fla.ops.kda import fused_recurrent_kda
    # FLA takes the state rows as [N, HV, K, V] (no pool indirection here)
    rows = _rows.get(id(state))
    if rows is None:
        rows = _rows[id(state)] = state[slots].contiguous()
    fused_recurrent_kda(q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None],
                        initial_state=rows, output_final_state=True)


_rows = {}


def kda_prefill(q, k, v, g, beta, o, h0, ht):
    from fla.ops.kda import chunk_kda
    chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
