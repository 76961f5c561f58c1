"""vision_ref.py - an independent NumPy implementation (float64) of the Qwen3-VL / Qwen3.5 vision
tower, written from Hugging Face's Qwen3VLVisionModel (modeling_qwen3_vl.py) and the mmproj GGUF
layout of llama.cpp's converter (projector type qwen3vl_merger), not from deltaserve's C code.

    t = Tower(model_files.read_gguf(path))
    r = t.forward(patches, grid_t, grid_h, grid_w)
    r["embed"]       [n][D]  patch embedding + interpolated position embedding
    r["blocks"][l]   [n][D]  the residual stream after block l
    r["deepstack"]   [k][n/4][E]  each DeepStack merger's output, in deepstack_visual_indexes order
    r["merger"]      [n/4][E]

patches: [n][3 * 2 * P * P], the HF processor's flattening (merge-group order; each patch
[channel][frame][row][column]).
"""

import math

import numpy as np


def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):  # HF gelu_pytorch_tanh
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(x):  # nn.GELU()
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class Tower:
    def __init__(self, g, rope_theta=10000.0):
        kv = g.kv

        def u(key):
            return kv[key].value

        def arr(name):
            return g.tensors[name].array().astype(np.float64)

        self.D = u("clip.vision.embedding_length")
        self.n_head = u("clip.vision.attention.head_count")
        self.F = u("clip.vision.feed_forward_length")
        self.L = u("clip.vision.block_count")
        self.P = u("clip.vision.patch_size")
        self.E = u("clip.vision.projection_dim")
        self.eps = kv["clip.vision.attention.layer_norm_epsilon"].value
        self.merge = kv["clip.vision.spatial_merge_size"].value if "clip.vision.spatial_merge_size" in kv else 2
        self.theta = rope_theta
        D, P = self.D, self.P
        # Conv3d weight [D][3][2][P][P] from its two frame halves (each {P, P, 3, D} in ggml order)
        w0, w1 = arr("v.patch_embd.weight"), arr("v.patch_embd.weight.1")
        self.patch_w = np.stack([w0, w1], axis=2).reshape(D, 3 * 2 * P * P)
        self.patch_b = arr("v.patch_embd.bias")
        self.pos = arr("v.position_embd.weight")  # [n_pos][D]
        self.side = int(round(math.sqrt(self.pos.shape[0])))
        self.blocks = []
        for l in range(self.L):
            p = f"v.blk.{l}."
            self.blocks.append({k: arr(p + k) for k in (
                "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attn_qkv.weight", "attn_qkv.bias",
                "attn_out.weight", "attn_out.bias", "ffn_up.weight", "ffn_up.bias", "ffn_down.weight",
                "ffn_down.bias")})
        self.post_ln = (arr("v.post_ln.weight"), arr("v.post_ln.bias"))
        self.mm = (arr("mm.0.weight"), arr("mm.0.bias"), arr("mm.2.weight"), arr("mm.2.bias"))
        # DeepStack mergers: llama.cpp's loader finds them by block, as the tensors are there
        self.deepstack = []
        for l in range(self.L):
            p = f"v.deepstack.{l}."
            if p + "norm.weight" in g.tensors:
                self.deepstack.append((l, {k: arr(p + k) for k in (
                    "norm.weight", "norm.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")}))

    # HF fast_pos_embed_interpolate, for one image
    def position_embeddings(self, t, h, w):
        S, m = self.side, self.merge
        h_idx = np.linspace(0, S - 1, h)
        w_idx = np.linspace(0, S - 1, w)
        hf, wf = h_idx.astype(np.int64), w_idx.astype(np.int64)
        hc, wc = np.minimum(hf + 1, S - 1), np.minimum(wf + 1, S - 1)
        dh, dw = h_idx - hf, w_idx - wf
        pe = (self.pos[(hf[:, None] * S + wf[None, :]).ravel()] * ((1 - dh)[:, None] * (1 - dw)[None, :]).ravel()[:, None]
              + self.pos[(hf[:, None] * S + wc[None, :]).ravel()] * ((1 - dh)[:, None] * dw[None, :]).ravel()[:, None]
              + self.pos[(hc[:, None] * S + wf[None, :]).ravel()] * (dh[:, None] * (1 - dw)[None, :]).ravel()[:, None]
              + self.pos[(hc[:, None] * S + wc[None, :]).ravel()] * (dh[:, None] * dw[None, :]).ravel()[:, None])
        pe = np.tile(pe, (t, 1))
        pe = pe.reshape(t, h // m, m, w // m, m, -1).transpose(0, 1, 3, 2, 4, 5).reshape(-1, self.D)
        return pe

    # HF rot_pos_emb: (row, column) of each patch in merge order, VisionRotaryEmbedding(head_dim / 2)
    def rotary(self, t, h, w):
        m, hd = self.merge, self.D // self.n_head
        dim = hd // 2
        inv_freq = 1.0 / (self.theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
        rows = (np.arange(h // m)[:, None, None, None] * m + np.arange(m)[None, None, :, None])
        cols = (np.arange(w // m)[None, :, None, None] * m + np.arange(m)[None, None, None, :])
        rows = np.broadcast_to(rows, (h // m, w // m, m, m)).ravel()
        cols = np.broadcast_to(cols, (h // m, w // m, m, m)).ravel()
        rows, cols = np.tile(rows, t), np.tile(cols, t)
        emb = np.concatenate([np.outer(rows, inv_freq), np.outer(cols, inv_freq)], axis=1)  # [n][hd/2]
        emb = np.concatenate([emb, emb], axis=1)
        return np.cos(emb), np.sin(emb)

    def block(self, x, b, cos, sin):
        n, D, nh = x.shape[0], self.D, self.n_head
        hd = D // nh
        u = layer_norm(x, b["ln1.weight"], b["ln1.bias"], self.eps)
        qkv = (u @ b["attn_qkv.weight"].T + b["attn_qkv.bias"]).reshape(n, 3, nh, hd).transpose(1, 0, 2, 3)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [n][nh][hd]
        q = q * cos[:, None, :] + rotate_half(q) * sin[:, None, :]
        k = k * cos[:, None, :] + rotate_half(k) * sin[:, None, :]
        out = np.empty((n, nh, hd))
        for h in range(nh):
            s = q[:, h, :] @ k[:, h, :].T / math.sqrt(hd)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, h, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, h, :]
        x = x + out.reshape(n, D) @ b["attn_out.weight"].T + b["attn_out.bias"]
        u = layer_norm(x, b["ln2.weight"], b["ln2.bias"], self.eps)
        hid = gelu_tanh(u @ b["ffn_up.weight"].T + b["ffn_up.bias"])
        return x + hid @ b["ffn_down.weight"].T + b["ffn_down.bias"]

    def forward(self, patches, t, h, w):
        patches = np.asarray(patches, dtype=np.float64)
        x = patches @ self.patch_w.T + self.patch_b + self.position_embeddings(t, h, w)
        cos, sin = self.rotary(t, h, w)
        r = {"embed": x.copy(), "blocks": [], "deepstack": []}
        deep = dict(self.deepstack)
        n4 = x.shape[0] // 4
        for l, b in enumerate(self.blocks):
            x = self.block(x, b, cos, sin)
            r["blocks"].append(x.copy())
            if l in deep:
                d = deep[l]
                u = layer_norm(x.reshape(n4, 4 * self.D), d["norm.weight"], d["norm.bias"], self.eps)
                u = gelu_erf(u @ d["fc1.weight"].T + d["fc1.bias"])
                r["deepstack"].append(u @ d["fc2.weight"].T + d["fc2.bias"])
        u = layer_norm(x, self.post_ln[0], self.post_ln[1], self.eps).reshape(n4, 4 * self.D)
        u = gelu_erf(u @ self.mm[0].T + self.mm[1])
        r["merger"] = u @ self.mm[2].T + self.mm[3]
        return r
