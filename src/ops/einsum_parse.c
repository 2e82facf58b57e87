/* einsum, step one: the spec parsed into terms of letter ids, and the terms bound to
 * the operands.
 *
 * parse  the spec into terms of letter ids (A-Z = 0..25, a-z = 26..51, so sorting ids
 *        sorts by character code, as torch orders an implicit output) and the place
 *        of each "...".
 * bind   the terms to the operands: every index (a letter, or one dim under "...",
 *        right-aligned across operands) gets an extent (size-1 dims broadcast, as in
 *        torch) and, in each operand, an element stride. A letter repeated in one
 *        operand is a diagonal: its stride is the sum of the strides.
 * Only shapes and strides are read here. */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "ops/einsum_internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ parse */

static int ei_letter_id(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
    return -1;
}

static char ei_id_char(int id) { return (char)(id < 26 ? 'A' + id : 'a' + (id - 26)); }

static const char *ei_term_name(char *buf, size_t size, const ei_spec *sp, const ei_term *t)
{
    int len = t->end - t->begin;
    snprintf(buf, size, "'%.*s'", len, sp->text + t->begin);
    return buf;
}

/* torch's implicit output: the "..." dims first, then the letters that occur exactly
 * once over all operands, in character-code order (uppercase before lowercase). */
static void ei_implicit_output(ei_spec *sp, const int *count)
{
    ei_term *o = &sp->out;
    o->ell = -1;
    for (int k = 0; k < sp->nops; k++)
        if (sp->in[k].ell >= 0) o->ell = 0;
    o->n = 0;
    for (int id = 0; id < EI_LETTERS; id++)
        if (count[id] == 1) o->lab[o->n++] = (int8_t)id;
}

static ta_status ei_parse(ei_spec *sp, const char *fn, const char *spec)
{
    memset(sp, 0, sizeof *sp);
    sp->text = spec;
    sp->nops = 1;
    ei_term *t = &sp->in[0];
    t->ell = -1;
    const char *where = "operand 0";
    static const char *const op_names[2] = {"operand 0", "operand 1"};
    size_t len = strlen(spec);
    for (size_t p = 0; p < len; p++) {
        char c = spec[p];
        if (c == ' ') continue;
        int id = ei_letter_id(c);
        if (id >= 0) {
            if (t->n == EI_MAX_TERM)
                return ta_error(TA_EINVAL, "%s: spec '%s' has more than %d letters in %s", fn,
                                spec, EI_MAX_TERM, where);
            t->lab[t->n++] = (int8_t)id;
        } else if (c == '.') {
            if (spec[p + 1] != '.' || spec[p + 2] != '.')
                return ta_error(TA_EINVAL,
                                "%s: spec '%s' has a '.' at position %zu that is not part of "
                                "an ellipsis '...'", fn, spec, p);
            if (t->ell >= 0)
                return ta_error(TA_EINVAL, "%s: spec '%s' has more than one '...' in %s", fn,
                                spec, where);
            t->ell = t->n;
            p += 2;
        } else if (c == ',') {
            if (sp->explicit_out)
                return ta_error(TA_EINVAL, "%s: spec '%s' has a ',' after '->' (position %zu)",
                                fn, spec, p);
            if (sp->nops == 2)
                return ta_error(TA_EINVAL,
                                "%s: spec '%s' names more than two operands; at most two are "
                                "supported", fn, spec);
            t->end = (int)p;
            where = op_names[sp->nops];
            t = &sp->in[sp->nops++];
            t->ell = -1;
            t->begin = (int)p + 1;
        } else if (c == '-' && spec[p + 1] == '>') {
            if (sp->explicit_out)
                return ta_error(TA_EINVAL, "%s: spec '%s' has more than one '->'", fn, spec);
            t->end = (int)p;
            sp->explicit_out = true;
            where = "the output";
            t = &sp->out;
            t->ell = -1;
            t->begin = (int)p + 2;
            p++;
        } else if (c > 32 && c < 127) {
            return ta_error(TA_EINVAL,
                            "%s: spec '%s' has an invalid character '%c' at position %zu; "
                            "indices must be letters a-z or A-Z", fn, spec, c, p);
        } else {
            return ta_error(TA_EINVAL,
                            "%s: spec has an invalid character (code %d) at position %zu; "
                            "indices must be letters a-z or A-Z", fn, (int)(unsigned char)c, p);
        }
    }
    t->end = (int)len;

    int count[EI_LETTERS] = {0};
    for (int k = 0; k < sp->nops; k++)
        for (int i = 0; i < sp->in[k].n; i++) count[sp->in[k].lab[i]]++;
    if (!sp->explicit_out) {
        ei_implicit_output(sp, count);
        return TA_OK;
    }
    bool seen[EI_LETTERS] = {false};
    for (int i = 0; i < sp->out.n; i++) {
        int id = sp->out.lab[i];
        if (count[id] == 0)
            return ta_error(TA_EINVAL,
                            "%s: spec '%s': output index '%c' does not appear in any operand",
                            fn, spec, ei_id_char(id));
        if (seen[id])
            return ta_error(TA_EINVAL,
                            "%s: spec '%s': output index '%c' appears more than once", fn, spec,
                            ei_id_char(id));
        seen[id] = true;
    }
    return TA_OK;
}

/* ------------------------------------------------------------------- bind */

/* Index id of dim d of a term with ne dims under "..." (E in all). */
static int ei_dim_id(const ei_term *t, int d, int ne, int E)
{
    if (t->ell >= 0 && d >= t->ell && d < t->ell + ne) return EI_LETTERS + E - ne + (d - t->ell);
    return t->lab[(t->ell >= 0 && d >= t->ell) ? d - ne : d];
}

static ta_status ei_bind_sizes(ei_bind *bd, const char *fn, const ei_spec *sp, int k)
{
    for (int id = 0; id < EI_MAX_IDX; id++) {
        int64_t s = bd->opsize[k][id];
        if (s < 0) continue;
        if (!bd->used[id]) {
            bd->used[id] = true;
            bd->size[id] = s;
        } else if (s != bd->size[id] && s != 1) {
            if (bd->size[id] != 1) {
                if (id < EI_LETTERS)
                    return ta_error(TA_ESHAPE,
                                    "%s: index '%c' has size %lld in operand 0 but %lld in "
                                    "operand 1 (spec '%s')", fn, ei_id_char(id),
                                    (long long)bd->size[id], (long long)s, sp->text);
                return ta_error(TA_ESHAPE,
                                "%s: dim %d under '...' has size %lld in operand 0 but %lld "
                                "in operand 1, which do not broadcast (spec '%s')", fn,
                                id - EI_LETTERS, (long long)bd->size[id], (long long)s,
                                sp->text);
            }
            bd->size[id] = s; /* operand 0 had extent 1: it broadcasts */
        }
    }
    return TA_OK;
}

static ta_status ei_bind_ops(ei_bind *bd, const char *fn, const ei_spec *sp,
                             const ta_tensor *const *ops)
{
    memset(bd, 0, sizeof *bd);
    bd->nops = sp->nops;
    int ne[2] = {0, 0};
    char name[96];
    for (int k = 0; k < sp->nops; k++) {
        const ei_term *t = &sp->in[k];
        int nd = ops[k]->ndim;
        if (t->ell < 0 && nd != t->n)
            return ta_error(TA_ESHAPE, "%s: operand %d has %d dims but the spec %s names %d",
                            fn, k, nd, ei_term_name(name, sizeof name, sp, t), t->n);
        if (t->ell >= 0 && nd < t->n)
            return ta_error(TA_ESHAPE,
                            "%s: operand %d has %d dims but the spec %s names at least %d", fn,
                            k, nd, ei_term_name(name, sizeof name, sp, t), t->n);
        ne[k] = t->ell >= 0 ? nd - t->n : 0;
        bd->E = TA_MAX(bd->E, ne[k]);
    }
    for (int k = 0; k < sp->nops; k++) {
        for (int id = 0; id < EI_MAX_IDX; id++) bd->opsize[k][id] = -1;
        const ta_tensor *x = ops[k];
        for (int d = 0; d < x->ndim; d++) {
            int id = ei_dim_id(&sp->in[k], d, ne[k], bd->E);
            int64_t s = x->shape[d];
            if (bd->opsize[k][id] >= 0 && bd->opsize[k][id] != s)
                return ta_error(TA_ESHAPE,
                                "%s: index '%c' is repeated in operand %d with sizes %lld and "
                                "%lld; a diagonal needs equal sizes", fn, ei_id_char(id), k,
                                (long long)bd->opsize[k][id], (long long)s);
            bd->opsize[k][id] = s;
            if (s != 1) bd->stride[k][id] += x->stride[d];
        }
        ta_status st = ei_bind_sizes(bd, fn, sp, k);
        if (st) return st;
    }
    const ei_term *o = &sp->out;
    int nd = o->n + (o->ell >= 0 ? bd->E : 0);
    if (nd > TA_MAX_DIMS)
        return ta_error(TA_EUNSUPPORTED,
                        "%s: the result of spec '%s' would have %d dims; at most %d are "
                        "supported", fn, sp->text, nd, TA_MAX_DIMS);
    bd->out_ndim = nd;
    for (int d = 0; d < nd; d++) {
        int id = ei_dim_id(o, d, o->ell >= 0 ? bd->E : 0, bd->E);
        bd->out_id[d] = id;
        bd->out_shape[d] = bd->size[id];
        bd->in_out[id] = true;
    }
    return TA_OK;
}

/* ------------------------------------------------------------- validation */

/* ta_tensor_check; for a layout-only check a tensor without data is taken as placed
 * (its shape and strides are all a size query reads). */
static ta_status ei_check_tensor(const char *fn, const char *name, const ta_tensor *t,
                                 ei_check check)
{
    static float placed;
    if (check == EI_CHECK_LAYOUT && t && !t->data) {
        ta_tensor view = *t;
        view.data = &placed;
        return ta_tensor_check(fn, name, &view);
    }
    return ta_tensor_check(fn, name, t);
}

ta_status ei_prepare(ei_spec *sp, ei_bind *bd, const char *fn, const char *spec,
                     const ta_tensor *a, const ta_tensor *b, int nops, ei_check check)
{
    if (!spec) return ta_error(TA_EINVAL, "%s: spec is NULL", fn);
    bool b_decides = nops == 0;
    if (b_decides) nops = b ? 2 : 1;
    ta_status st = ei_check_tensor(fn, "a", a, check);
    if (st) return st;
    if (nops == 2 && (st = ei_check_tensor(fn, "b", b, check))) return st;
    if ((st = ei_parse(sp, fn, spec))) return st;
    if (sp->nops != nops) {
        const char *hint = b_decides ? (nops == 1 ? " (b is NULL)" : " (b is set)")
                           : sp->nops == 2 ? " (use ta_einsum for two operands)"
                           : " (use ta_einsum1 for one operand)";
        return ta_error(TA_EINVAL, "%s: spec '%s' names %d operand%s but %d %s given%s", fn,
                        spec, sp->nops, sp->nops == 1 ? "" : "s", nops,
                        nops == 1 ? "was" : "were", hint);
    }
    const ta_tensor *ops[2] = {a, b};
    return ei_bind_ops(bd, fn, sp, ops);
}

ta_status ei_check_out(const char *fn, const ta_tensor *out, const ei_bind *bd,
                       const char *spec, ei_check check)
{
    ta_status st = ei_check_tensor(fn, "out", out, check);
    if (st) return st;
    bool same = out->ndim == bd->out_ndim;
    for (int d = 0; same && d < out->ndim; d++) same = out->shape[d] == bd->out_shape[d];
    if (!same) {
        char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
        return ta_error(TA_ESHAPE, "%s: out has shape %s but the result of '%s' has shape %s",
                        fn, ta_shape_str(s1, sizeof s1, out->ndim, out->shape), spec,
                        ta_shape_str(s2, sizeof s2, bd->out_ndim, bd->out_shape));
    }
    return ta_tensor_check_unaliased(fn, "out", out); /* several results on one element */
}
