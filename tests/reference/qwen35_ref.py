"""qwen35_ref.py - an independent NumPy implementation of the Qwen3 / Qwen3.5 /
Qwen3.5-MoE forward pass and MTP head, written from the architecture spec
(docs/model.md §3 and §5), in float64.

It takes a config dict and the canonical tensors (GGUF names; arrays in PyTorch
order, i.e. [out, in] for a linear weight; norms already holding the multiplier,
ssm_a = -exp(A_log)), as tests/reference/model_files.py loads them from either
file format. It runs one sequence token by token with the plain recurrence: no
chunking, no paging, nothing shared with the C code but docs/model.md.
"""

import math

import numpy as np


def rms_norm(x, w, eps):
    x = np.asarray(x, dtype=np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rope_inv_freq(rope_dim, theta, yarn=None):
    """Each rotated pair's frequency and the factor on cos and sin: theta^(-2i/d), or YaRN as Hugging
    Face's _compute_yarn_parameters: kept frequencies blended with frequencies / factor along a
    linear ramp between the pairs that turn beta_fast and beta_slow times over the original context."""
    half = rope_dim // 2
    inv = theta ** (-2.0 * np.arange(half) / rope_dim)
    if not yarn:
        return inv, 1.0
    L = yarn["original_max_position_embeddings"]

    def corr_dim(rot):
        return rope_dim * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(theta))
    low, high = corr_dim(yarn["beta_fast"]), corr_dim(yarn["beta_slow"])
    if yarn.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rope_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(half) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    interp = inv / yarn["factor"]
    return interp * (1 - extrapolation) + inv * extrapolation, yarn["attention_factor"]


def rope_angles(pos, rope_dim, theta, sections=None, interleaved=True, yarn=None):
    """The angle of each rotated pair. pos: a position (1-D RoPE), or (t, h, w) for M-RoPE as
    Hugging Face's Qwen3-VL / Qwen3.5 rotary embedding computes it: one angle table per axis,
    then, interleaved (apply_interleaved_mrope), the T table with H at pairs 1, 4, 7, ... below
    3 * sections[1] and W at pairs 2, 5, 8, ... below 3 * sections[2]; else (Qwen2-VL) the
    contiguous sections T, H, W of the pairs."""
    inv, _ = rope_inv_freq(rope_dim, theta, yarn)
    if np.ndim(pos) == 0:
        return pos * inv
    per_axis = [p * inv for p in pos]
    if interleaved:
        ang = per_axis[0].copy()
        for a in (1, 2):
            idx = slice(a, 3 * sections[a], 3)
            ang[idx] = per_axis[a][idx]
        return ang
    b0, b1 = sections[0], sections[0] + sections[1]
    return np.concatenate([per_axis[0][:b0], per_axis[1][b0:b1], per_axis[2][b1:]])


def get_rope_index(input_ids, image_grid_thw, image_token_id, vision_start_token_id, spatial_merge_size=2):
    """Hugging Face's get_rope_index (Qwen3-VL, which Qwen3.5 inherits) for one sequence of text and
    images, from its token ids: [3, n] positions (T, H, W) and the delta of what follows. Text
    counts on from the largest position so far plus one; an image's tokens (t, h, w order of its
    merged grid) take the position its first token would have had as text plus (ti, hi, wi)."""
    ids = list(input_ids)
    n_images = sum(1 for i, t in enumerate(ids[:-1]) if t == vision_start_token_id and ids[i + 1] == image_token_id)
    pieces, st = [], 0
    for k in range(n_images):
        ed = ids.index(image_token_id, st)
        t, h, w = image_grid_thw[k]
        gt, gh, gw = t, h // spatial_merge_size, w // spatial_merge_size
        text_len = ed - st
        st_idx = pieces[-1].max() + 1 if pieces else 0
        pieces.append(np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx)
        t_idx = np.repeat(np.arange(gt), gh * gw)
        h_idx = np.tile(np.repeat(np.arange(gh), gw), gt)
        w_idx = np.tile(np.arange(gw), gt * gh)
        pieces.append(np.stack([t_idx, h_idx, w_idx]) + text_len + st_idx)
        st = ed + gt * gh * gw
    if st < len(ids):
        st_idx = pieces[-1].max() + 1 if pieces else 0
        text_len = len(ids) - st
        pieces.append(np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx)
    pos = np.concatenate(pieces, axis=1)
    return pos, int(pos.max() + 1 - len(ids))


def rope(x, pos, rope_dim, theta, sections=None, interleaved=True, yarn=None):
    """NeoX rotate-half on the first rope_dim dims of each head (x: [heads, hd]); pos as in rope_angles;
    YaRN scales cos and sin by its attention factor."""
    half = rope_dim // 2
    ang = rope_angles(pos, rope_dim, theta, sections, interleaved, yarn)
    mscale = rope_inv_freq(rope_dim, theta, yarn)[1]
    c, s = mscale * np.cos(ang), mscale * np.sin(ang)
    out = x.copy()
    a, b = x[:, :half], x[:, half:rope_dim]
    out[:, :half] = a * c - b * s
    out[:, half:rope_dim] = b * c + a * s
    return out


class Reference:
    def __init__(self, cfg, tensors):
        self.c = cfg
        self.t = {k: np.asarray(v, dtype=np.float64) for k, v in tensors.items()}
        c = cfg
        self.kv = {}            # layer -> (list of k [nkv, hd], list of v)
        self.conv = {}          # layer -> [K-1, C] raw inputs
        self.S = {}             # layer -> [Hv, Dk, Dv]
        self.mtp_kv = ([], [])
        self.pos = 0

    def w(self, layer, name):
        return self.t[f"blk.{layer}.{name}"] if layer is not None else self.t[name]

    # --- attention (docs/model.md §3.4) ---
    def attention(self, L, u, pos, cache):
        c = self.c
        nh, nkv, hd = c["n_head"], c["n_head_kv"], c["head_dim"]
        qg = self.w(L, "attn_q.weight") @ u
        if c["attn_output_gate"]:
            qg = qg.reshape(nh, 2 * hd)
            q, gate = qg[:, :hd], qg[:, hd:]
        else:
            q, gate = qg.reshape(nh, hd), None
        k = (self.w(L, "attn_k.weight") @ u).reshape(nkv, hd)
        v = (self.w(L, "attn_v.weight") @ u).reshape(nkv, hd)
        q = rms_norm(q, self.w(L, "attn_q_norm.weight"), c["rms_eps"])
        k = rms_norm(k, self.w(L, "attn_k_norm.weight"), c["rms_eps"])
        sec, inter = c.get("mrope_sections"), c.get("mrope_interleaved", True)
        q = rope(q, pos, c["rope_dim"], c["rope_theta"], sec, inter, c.get("yarn"))
        k = rope(k, pos, c["rope_dim"], c["rope_theta"], sec, inter, c.get("yarn"))
        cache[0].append(k)
        cache[1].append(v)
        K = np.stack(cache[0])      # [T, nkv, hd]
        V = np.stack(cache[1])
        group = nh // nkv
        out = np.zeros((nh, hd))
        for h in range(nh):
            j = h // group
            sc = K[:, j, :] @ q[h] / np.sqrt(hd)
            p = np.exp(sc - sc.max())
            p /= p.sum()
            out[h] = p @ V[:, j, :]
        if gate is not None:
            out = out * sigmoid(gate)
        return self.w(L, "attn_output.weight") @ out.reshape(-1)

    # --- Gated DeltaNet (docs/model.md §3.5), recurrent form ---
    def deltanet(self, L, u):
        c = self.c
        Hk, Hv, Dk, Dv, K = c["lin_k_heads"], c["lin_v_heads"], c["lin_k_dim"], c["lin_v_dim"], c["conv_kernel"]
        key_dim = Hk * Dk
        mixed = self.w(L, "attn_qkv.weight") @ u
        z = (self.w(L, "attn_gate.weight") @ u).reshape(Hv, Dv)
        b = self.w(L, "ssm_beta.weight") @ u
        a = self.w(L, "ssm_alpha.weight") @ u
        C = mixed.shape[0]
        win = self.conv.setdefault(L, np.zeros((K - 1, C)))
        X = np.vstack([win, mixed[None, :]])              # [K, C], oldest first
        W = self.w(L, "ssm_conv1d.weight")                 # [C, K]; tap j weights x_{t-(K-1)+j}
        y = silu(np.sum(W.T * X, axis=0))
        self.conv[L] = X[1:]
        q = y[:key_dim].reshape(Hk, Dk)
        k = y[key_dim:2 * key_dim].reshape(Hk, Dk)
        v = y[2 * key_dim:].reshape(Hv, Dv)
        q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6) / np.sqrt(Dk)
        k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
        beta = sigmoid(b)
        g = self.w(L, "ssm_a") * softplus(a + self.w(L, "ssm_dt.bias"))
        S = self.S.setdefault(L, np.zeros((Hv, Dk, Dv)))
        o = np.zeros((Hv, Dv))
        r = Hv // Hk
        for h in range(Hv):
            kh = h % Hk if c["v_heads_tiled"] else h // r
            Sh = np.exp(g[h]) * S[h]
            m = Sh.T @ k[kh]
            delta = beta[h] * (v[h] - m)
            Sh = Sh + np.outer(k[kh], delta)
            S[h] = Sh
            o[h] = Sh.T @ q[kh]
        n = rms_norm(o, self.w(L, "ssm_norm.weight"), c["rms_eps"])
        yh = n * silu(z)
        return self.w(L, "ssm_out.weight") @ yh.reshape(-1)

    # --- feed-forward (docs/model.md §3.6, §3.7) ---
    def ffn(self, L, u):
        c = self.c
        if c["arch"] != "qwen35moe":
            return self.w(L, "ffn_down.weight") @ (silu(self.w(L, "ffn_gate.weight") @ u) * (self.w(L, "ffn_up.weight") @ u))
        logits = self.w(L, "ffn_gate_inp.weight") @ u
        p = np.exp(logits - logits.max())
        p /= p.sum()
        idx = np.argsort(-p, kind="stable")[:c["n_expert_used"]]
        wts = p[idx] / p[idx].sum()
        y = np.zeros_like(u)
        G, U, D = self.w(L, "ffn_gate_exps.weight"), self.w(L, "ffn_up_exps.weight"), self.w(L, "ffn_down_exps.weight")
        for e, wt in zip(idx, wts):
            y += wt * (D[e] @ (silu(G[e] @ u) * (U[e] @ u)))
        sh = self.w(L, "ffn_down_shexp.weight") @ (silu(self.w(L, "ffn_gate_shexp.weight") @ u) * (self.w(L, "ffn_up_shexp.weight") @ u))
        gate = sigmoid(np.dot(self.w(L, "ffn_gate_inp_shexp.weight").reshape(-1), u))
        return y + gate * sh

    def layer(self, L, x, pos, full, cache):
        c = self.c
        u = rms_norm(x, self.w(L, "attn_norm.weight"), c["rms_eps"])
        if full:
            h = x + self.attention(L, u, pos, cache)
        else:
            h = x + self.deltanet(L, u)
        ffn_norm = "ffn_norm.weight" if c["arch"] == "qwen3" else "post_attention_norm.weight"
        u = rms_norm(h, self.w(L, ffn_norm), c["rms_eps"])
        return h + self.ffn(L, u)

    def head(self):
        return self.t["output.weight"] if "output.weight" in self.t else self.t["token_embd.weight"]

    def step(self, token, embd=None, rope_pos=None, deepstack=()):
        """One token at the next position: returns (logits [V], hidden after the final norm [H]).
        An image token: embd its input in place of the token's embedding, rope_pos its (t, h, w)
        M-RoPE position, deepstack[k] added to the hidden state after layer k (Hugging Face's
        Qwen3-VL _deepstack_process)."""
        c = self.c
        x = np.array(embd, dtype=np.float64) if embd is not None else self.t["token_embd.weight"][token].copy()
        pos = self.pos if rope_pos is None else tuple(int(p) for p in rope_pos)
        for L in range(c["n_layer"]):
            full = c["layer_full"][L]
            x = self.layer(L, x, pos, full, self.kv.setdefault(L, ([], [])))
            if L < len(deepstack):
                x = x + deepstack[L]
        self.pos += 1
        h = rms_norm(x, self.t["output_norm.weight"], c["rms_eps"])
        return self.head() @ h, h

    def run(self, tokens, embd=None, rope_pos=None, deepstack=None):
        """embd[i] / deepstack[i] (None for text) and rope_pos [3, n] per token, as step takes them."""
        logits, hidden = [], []
        for i, t in enumerate(tokens):
            lg, h = self.step(t, None if embd is None else embd[i], None if rope_pos is None else rope_pos[:, i],
                              () if deepstack is None or deepstack[i] is None else deepstack[i])
            logits.append(lg)
            hidden.append(h)
        return np.array(logits), np.array(hidden)

    def mtp(self, token, hidden, pos, embd=None):
        """MTP head (docs/model.md §5.1): next token x_{t+1}, main hidden h_t, at position t (or its
        (t, h, w) M-RoPE position); embd: x_{t+1}'s image embedding when it is an image token."""
        c = self.c
        L = c["n_layer"]
        x_in = np.asarray(embd, dtype=np.float64) if embd is not None else self.t["token_embd.weight"][token]
        e = rms_norm(x_in, self.w(L, "nextn.enorm.weight"), c["rms_eps"])
        hh = rms_norm(hidden, self.w(L, "nextn.hnorm.weight"), c["rms_eps"])
        x = self.w(L, "nextn.eh_proj.weight") @ np.concatenate([e, hh])
        x = self.layer(L, x, pos, True, self.mtp_kv)
        hm = rms_norm(x, self.w(L, "nextn.shared_head_norm.weight"), c["rms_eps"])
        return self.head() @ hm, hm
