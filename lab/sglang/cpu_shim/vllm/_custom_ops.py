"""Pure-torch rotary_embedding with vllm._custom_ops' signature (in place on query/key)."""
import torch


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    pos = positions.flatten()
    cos, sin = cos_sin_cache.index_select(0, pos).chunk(2, dim=-1)

    def apply(x):
        v = x.view(pos.numel(), -1, head_size)
        rot = cos.shape[-1] * 2
        xr, xp = v[..., :rot], v[..., rot:]
        c, s = cos.unsqueeze(1).to(v.dtype), sin.unsqueeze(1).to(v.dtype)
        if is_neox:
            x1, x2 = xr.chunk(2, dim=-1)
            out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
        else:
            x1, x2 = xr[..., ::2], xr[..., 1::2]
            out = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
        v.copy_(torch.cat((out, xp), dim=-1))

    apply(query)
    if key is not None:
        apply(key)
