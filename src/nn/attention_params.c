/* The attention layers' parameters: create (PyTorch's initialisation from our
 * generator), load and save (.safetensors, the modules' state_dict names), free, lookup
 * of values and gradients, and the layer's facts (include/tensorattn.h documents the
 * layouts). */
#include "core/core.h"
#include "nn/attention_internal.h"

#include <math.h>
#include <string.h>

#define MAX_PARAMS TA_ATTN_MAX_PARAMS

/* Parameter indices (the state_dict order documented in the header). */
enum { SEED_VALUES = TA_SEED_VALUES, SEED_KEYS = TA_SEED_KEYS, SEED_QUERIES = TA_SEED_QUERIES,
       SEED_FC_W = TA_SEED_FC_W, SEED_FC_B = TA_SEED_FC_B };
enum { TORCH_IN_W = TA_TORCH_IN_W, TORCH_IN_B = TA_TORCH_IN_B, TORCH_OUT_W = TA_TORCH_OUT_W,
       TORCH_OUT_B = TA_TORCH_OUT_B };

static const char *const SEED_NAMES[5] = {"values.weight", "keys.weight", "queries.weight",
                                          "fc_out.weight", "fc_out.bias"};
static const char *const TORCH_NAMES[4] = {"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                           "out_proj.bias"};

static const char *layout_name(ta_layout layout)
{
    return layout == TA_LAYOUT_SEED ? "seed" : "torch";
}

/* The PyTorch shape of parameter i for embed E, head_dim D. */
static int param_shape(int64_t shape[2], ta_layout layout, int i, int64_t E, int64_t D)
{
    if (layout == TA_LAYOUT_SEED) {
        if (i < 3) { shape[0] = D; shape[1] = D; return 2; }
        if (i == SEED_FC_W) { shape[0] = E; shape[1] = E; return 2; }
        shape[0] = E;
        return 1;
    }
    switch (i) {
    case TORCH_IN_W: shape[0] = 3 * E; shape[1] = E; return 2;
    case TORCH_IN_B: shape[0] = 3 * E; return 1;
    case TORCH_OUT_W: shape[0] = E; shape[1] = E; return 2;
    default: shape[0] = E; return 1;
    }
}

void ta_attention_free(ta_attention *layer)
{
    if (!layer) return;
    for (int i = 0; i < layer->nparams; i++) {
        ta_tensor_free(&layer->p[i].value);
        ta_tensor_free(&layer->p[i].grad);
    }
    ta_free(layer->scratch);
    ta_free(layer);
}

static ta_status check_dims(const char *fn, ta_layout layout, int64_t E, int64_t H)
{
    if (layout != TA_LAYOUT_SEED && layout != TA_LAYOUT_TORCH)
        return ta_error(TA_EINVAL, "%s: layout %d is not TA_LAYOUT_SEED or TA_LAYOUT_TORCH", fn,
                        (int)layout);
    if (H < 1) return ta_error(TA_EINVAL, "%s: heads must be >= 1, got %lld", fn, (long long)H);
    if (E < 1)
        return ta_error(TA_EINVAL, "%s: embed_size must be >= 1, got %lld", fn, (long long)E);
    if (E % H)
        return ta_error(TA_EINVAL, "%s: embed_size %lld is not divisible by heads %lld", fn,
                        (long long)E, (long long)H);
    /* 3E x E must be addressable: keep E well inside int64 and size_t. */
    if (E > ((int64_t)1 << 24))
        return ta_error(TA_EINVAL, "%s: embed_size %lld is too large (max %lld)", fn,
                        (long long)E, (long long)1 << 24);
    return TA_OK;
}

/* A layer with zeroed gradient buffers and, when values is set, zeroed parameters
 * (ta_attention_load leaves them empty and moves the file's tensors in). */
static ta_status layer_alloc(ta_attention **out, ta_layout layout, int64_t E, int64_t H,
                             bool values)
{
    ta_attention *l = ta_alloc_zeroed(sizeof *l);
    if (!l) return TA_ENOMEM;
    l->layout = layout;
    l->E = E;
    l->H = H;
    l->D = E / H;
    l->nparams = layout == TA_LAYOUT_SEED ? 5 : 4;
    for (int i = 0; i < l->nparams; i++) {
        int64_t shape[2];
        int nd = param_shape(shape, layout, i, E, l->D);
        l->p[i].name = layout == TA_LAYOUT_SEED ? SEED_NAMES[i] : TORCH_NAMES[i];
        ta_status st = values ? ta_tensor_zeros(&l->p[i].value, nd, shape) : TA_OK;
        /* the gradient buffer (.grad), zero until a backward accumulates into it */
        if (!st) st = ta_tensor_zeros(&l->p[i].grad, nd, shape);
        if (st) {
            ta_attention_free(l);
            return st;
        }
    }
    *out = l;
    return TA_OK;
}

/* splitmix64: spreads (seed, parameter index) into independent generator streams. */
static uint64_t mix_seed(uint64_t seed, int i)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* U(-b, b) into a parameter; b > 0. */
static ta_status init_uniform(ta_tensor *t, double bound, uint64_t seed)
{
    return ta_rand_uniform(t, (float)-bound, (float)bound, seed);
}

ta_status ta_attention_create(ta_attention **layer, ta_layout layout, int64_t embed_size,
                              int64_t heads, uint64_t seed)
{
    const char *fn = "ta_attention_create";
    if (!layer) return ta_error(TA_EINVAL, "%s: layer is NULL", fn);
    ta_status st = check_dims(fn, layout, embed_size, heads);
    if (st) return st;
    ta_attention *l;
    if ((st = layer_alloc(&l, layout, embed_size, heads, true))) return st;
    double E = (double)embed_size, D = (double)l->D;
    if (layout == TA_LAYOUT_SEED) {
        /* nn.Linear: kaiming_uniform(a = sqrt(5)) is U(+-1/sqrt(fan_in)); bias the same. */
        for (int i = 0; i < 3 && !st; i++) st = init_uniform(&l->p[i].value, 1.0 / sqrt(D), mix_seed(seed, i));
        if (!st) st = init_uniform(&l->p[SEED_FC_W].value, 1.0 / sqrt(E), mix_seed(seed, SEED_FC_W));
        if (!st) st = init_uniform(&l->p[SEED_FC_B].value, 1.0 / sqrt(E), mix_seed(seed, SEED_FC_B));
    } else {
        /* MultiheadAttention._reset_parameters: xavier_uniform on [3E, E] (fan_in E,
         * fan_out 3E), biases 0; out_proj keeps nn.Linear's weight init. */
        st = init_uniform(&l->p[TORCH_IN_W].value, sqrt(6.0 / (E + 3.0 * E)), mix_seed(seed, TORCH_IN_W));
        if (!st) st = init_uniform(&l->p[TORCH_OUT_W].value, 1.0 / sqrt(E), mix_seed(seed, TORCH_OUT_W));
    }
    if (st) {
        ta_attention_free(l);
        return st;
    }
    *layer = l;
    return TA_OK;
}

ta_status ta_attention_load(ta_attention **layer, const char *path, ta_layout layout,
                            int64_t heads)
{
    const char *fn = "ta_attention_load";
    if (!layer) return ta_error(TA_EINVAL, "%s: layer is NULL", fn);
    if (!path) return ta_error(TA_EINVAL, "%s: path is NULL", fn);
    if (layout != TA_LAYOUT_SEED && layout != TA_LAYOUT_TORCH)
        return ta_error(TA_EINVAL, "%s: layout %d is not TA_LAYOUT_SEED or TA_LAYOUT_TORCH", fn,
                        (int)layout);
    if (heads < 1)
        return ta_error(TA_EINVAL, "%s: heads must be >= 1, got %lld", fn, (long long)heads);
    const char *const *names = layout == TA_LAYOUT_SEED ? SEED_NAMES : TORCH_NAMES;
    int n = layout == TA_LAYOUT_SEED ? 5 : 4;
    int out_w = layout == TA_LAYOUT_SEED ? SEED_FC_W : TORCH_OUT_W;

    ta_safetensors *sf;
    ta_status st = ta_safetensors_open(&sf, path);
    if (st) return st;
    ta_tensor t[MAX_PARAMS];
    memset(t, 0, sizeof t);
    ta_attention *l = NULL;
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    /* Every name first, so a file missing several names reports the first in order. */
    for (int i = 0; i < n; i++)
        if (ta_safetensors_find(sf, names[i]) < 0) {
            st = ta_error(TA_EFORMAT, "%s: %s has no tensor '%s' (%s layout)", fn, path, names[i],
                          layout_name(layout));
            goto done;
        }
    /* MultiheadAttention(add_bias_kv=True) appends a learned key and value to every
     * sequence: a file holding them is another layer, which ignoring them would run
     * silently wrong. */
    static const char *const kv_bias[2] = {"bias_k", "bias_v"};
    for (int i = 0; layout == TA_LAYOUT_TORCH && i < 2; i++)
        if (ta_safetensors_find(sf, kv_bias[i]) >= 0) {
            st = ta_error(TA_EUNSUPPORTED, "%s: %s holds '%s' (nn.MultiheadAttention with "
                          "add_bias_kv=True), which the torch layout does not support", fn, path,
                          kv_bias[i]);
            goto done;
        }
    for (int i = 0; i < n && !st; i++) st = ta_safetensors_get(&t[i], sf, names[i]);
    if (st) goto done;
    /* E comes from the output projection's rows: the one [E, E] in both layouts. */
    if (t[out_w].ndim != 2 || t[out_w].shape[0] < 1) {
        st = ta_error(TA_ESHAPE, "%s: %s: %s has shape %s, expected [E, E]", fn, path,
                      names[out_w], ta_shape_str(s1, sizeof s1, t[out_w].ndim, t[out_w].shape));
        goto done;
    }
    if (t[out_w].shape[1] != t[out_w].shape[0]) { /* named here, not through in_proj's E */
        st = ta_error(TA_ESHAPE, "%s: %s: %s has shape %s, expected [%lld, %lld]", fn, path,
                      names[out_w], ta_shape_str(s1, sizeof s1, 2, t[out_w].shape),
                      (long long)t[out_w].shape[0], (long long)t[out_w].shape[0]);
        goto done;
    }
    int64_t E = t[out_w].shape[0];
    if ((st = check_dims(fn, layout, E, heads))) goto done;
    for (int i = 0; i < n; i++) {
        int64_t want[2];
        int nd = param_shape(want, layout, i, E, E / heads);
        if (t[i].ndim != nd || t[i].shape[0] != want[0] || (nd == 2 && t[i].shape[1] != want[1])) {
            st = ta_error(TA_ESHAPE, "%s: %s: %s has shape %s, expected %s (embed_size %lld, heads %lld)",
                          fn, path, names[i], ta_shape_str(s1, sizeof s1, t[i].ndim, t[i].shape),
                          ta_shape_str(s2, sizeof s2, nd, want), (long long)E, (long long)heads);
            goto done;
        }
    }
    if ((st = layer_alloc(&l, layout, E, heads, false))) goto done;
    for (int i = 0; i < n; i++) {
        /* The loaded tensors are contiguous and of the right shape: take them over. */
        l->p[i].value = t[i];
        memset(&t[i], 0, sizeof t[i]);
    }
    *layer = l;
done:
    for (int i = 0; i < n; i++) ta_tensor_free(&t[i]);
    ta_safetensors_free(sf);
    return st;
}

ta_status ta_attention_save(const char *path, const ta_attention *layer)
{
    const char *fn = "ta_attention_save";
    if (!layer) return ta_error(TA_EINVAL, "%s: layer is NULL", fn);
    if (!path) return ta_error(TA_EINVAL, "%s: path is NULL", fn);
    const char *names[MAX_PARAMS];
    const ta_tensor *tensors[MAX_PARAMS];
    for (int i = 0; i < layer->nparams; i++) {
        names[i] = layer->p[i].name;
        tensors[i] = &layer->p[i].value;
    }
    return ta_safetensors_save(path, layer->nparams, names, tensors);
}

ta_layout ta_attention_layout(const ta_attention *layer)
{
    return layer ? layer->layout : TA_LAYOUT_SEED;
}

int64_t ta_attention_embed_size(const ta_attention *layer)
{
    return layer ? layer->E : 0;
}

int64_t ta_attention_heads(const ta_attention *layer)
{
    return layer ? layer->H : 0;
}

int ta_attention_param_count(const ta_attention *layer)
{
    return layer ? layer->nparams : 0;
}

const char *ta_attention_param_name(const ta_attention *layer, int i)
{
    if (!layer || i < 0 || i >= layer->nparams) return NULL;
    return layer->p[i].name;
}

/* A view of parameter `name` (its value, or its gradient buffer when grad is set);
 * errors name fn and list the layout's parameters. */
static ta_status lookup(ta_tensor *view, const ta_attention *layer, const char *name,
                              bool grad, const char *fn)
{
    if (!view) return ta_error(TA_EINVAL, "%s: view is NULL", fn);
    if (!layer) return ta_error(TA_EINVAL, "%s: layer is NULL", fn);
    if (!name) return ta_error(TA_EINVAL, "%s: name is NULL", fn);
    for (int i = 0; i < layer->nparams; i++)
        if (!strcmp(name, layer->p[i].name)) {
            *view = grad ? layer->p[i].grad : layer->p[i].value;
            view->owned = NULL; /* a view: ta_tensor_free on it must not release the layer's */
            return TA_OK;
        }
    if (layer->layout == TA_LAYOUT_SEED)
        return ta_error(TA_EINVAL,
                        "%s: the seed layout has no parameter '%s' (it has values.weight, "
                        "keys.weight, queries.weight, fc_out.weight, fc_out.bias)",
                        fn, name);
    return ta_error(TA_EINVAL,
                    "%s: the torch layout has no parameter '%s' (it has in_proj_weight, "
                    "in_proj_bias, out_proj.weight, out_proj.bias)",
                    fn, name);
}

ta_status ta_attention_param(ta_tensor *view, const ta_attention *layer, const char *name)
{
    return lookup(view, layer, name, false, "ta_attention_param");
}

ta_status ta_attention_grad(ta_tensor *view, const ta_attention *layer, const char *name)
{
    return lookup(view, layer, name, true, "ta_attention_grad");
}

ta_status ta_attention_zero_grad(ta_attention *layer)
{
    if (!layer) return ta_error(TA_EINVAL, "ta_attention_zero_grad: layer is NULL");
    for (int i = 0; i < layer->nparams; i++)
        memset(layer->p[i].grad.data, 0, sizeof(float) * (size_t)ta_tensor_numel(&layer->p[i].grad));
    return TA_OK;
}

/* The parameters of slot iw (weight) and ib (bias, -1: none), offset by `at` floats
 * (torch's in_proj slices). */
static ta_attention_proj proj(const ta_attention *l, int iw, int ib, int64_t at, int64_t F,
                              int64_t heads)
{
    ta_attention_proj p = {.W = (const float *)l->p[iw].value.data + at * F,
                           .dW = (float *)l->p[iw].grad.data + at * F, .F = F, .heads = heads};
    if (ib >= 0) {
        p.b = (const float *)l->p[ib].value.data + at;
        p.db = (float *)l->p[ib].grad.data + at;
    }
    return p;
}

ta_attention_proj ta_attention_input_proj(const ta_attention *l, int i)
{
    static const int seed_slot[3] = {SEED_QUERIES, SEED_KEYS, SEED_VALUES};
    if (l->layout == TA_LAYOUT_SEED) return proj(l, seed_slot[i], -1, 0, l->D, l->H);
    /* rows i*E .. (i+1)*E - 1 of in_proj_weight and in_proj_bias */
    return proj(l, TORCH_IN_W, TORCH_IN_B, i * l->E, l->E, 1);
}

ta_attention_proj ta_attention_output_proj(const ta_attention *l)
{
    if (l->layout == TA_LAYOUT_SEED) return proj(l, SEED_FC_W, SEED_FC_B, 0, l->E, 1);
    return proj(l, TORCH_OUT_W, TORCH_OUT_B, 0, l->E, 1);
}
