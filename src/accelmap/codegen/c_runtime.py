"""The generic tile-transfer runtime emitted at the top of every generated C file.

A buffer of operand X at level c holds, per instance of c, exactly the current
tile of X (the cost model's rule). Storage is a ring per axis: index value v of
axis a lives in slot ``v mod box[a]``, where ``box[a]`` is the widest span a tile
of that axis can have. Consecutive tiles then keep their common elements in
place (stationarity, sliding windows) and a new element only ever lands in the
slot of an element that has left, so a transfer moves exactly the delta.

Counting follows ``accelmap.cost.access_counts`` (see docs/codegen-and-simulator.md):
a member instance counts its own fills and drains; the parent counts one read
(inputs) or one update (outputs) per element needed by at least one instance of
a multicast / reduction group at that step; an output element's first touch in a
reduction lineage is zero-initialized instead of read.

Output partial sums move: a fetch takes the value out of the parent (leaving
zero) and a drain adds it back, so the total held across the hierarchy is
invariant and any order of fetches and drains yields the exact sum.
"""

C_RUNTIME = r"""
#include <stdint.h>
#include <string.h>

enum { FILLS = 0, READS = 1, UPDATES = 2, DRAINS = 3 };

typedef struct {
    int lvl, plvl, op, is_out, esize, naxes;
    int nt[MAXAX], td[MAXAX][MAXT], tc[MAXAX][MAXT];
    int ext[MAXAX];                       /* index-space extent of each axis */
    int box[MAXAX]; long pitch[MAXAX];    /* this level's ring */
    int E[ND];                            /* tile extent of every dim at this level */
    int parent_top;                       /* parent is the tensor in memory */
    int shape[MAXAX], pad[MAXAX]; long tstride[MAXAX];
    int pbox[MAXAX]; long ppitch[MAXAX];  /* parent's ring when parent_top == 0 */
    long ring, pring;
    /* nest positions of the loops above this level, their roles */
    int above[NL]; int nabove;
    int collapsed[NL];                    /* 1: spatial loop merged into one group (multicast / reduction) */
    int lineage[NL];                      /* 1: spatial reduction loop above the parent (outputs) */
    int nlineage;
    int inner[NL];                        /* 1: temporal loop above this level inside the outermost collapsed loop */
    int skip[MAXAX]; int anyskip;         /* 1: an axis the tile spans whole whose halo is generated, not moved */
} bufd_t;

typedef struct { int lo[ND]; int n[ND]; char ne; char drained; } tstate_t;

static const int L_DIM[NL] = L_DIM_INIT;
static const int L_STRIDE[NL] = L_STRIDE_INIT;
static const int L_BOUND[NL] = L_BOUND_INIT;
static const int L_LEVEL[NL] = L_LEVEL_INIT;
/* L_ABOVE[c][l]: loop l lies above level c's tiles (not inside them: Accelerator.inside in Python) */
static const unsigned char L_ABOVE[NLEV + 1][NL] = L_ABOVE_INIT;
static const int L_SPATIAL[NL] = L_SPATIAL_INIT;
static const int SIZE[ND] = SIZE_INIT;

static long long CNT[NLEV][NOPS][4];
static unsigned char MK_OLD[MAXAX][MAXEXT], MK_NEW[MAXAX][MAXEXT];
static int VALS[MAXAX][MAXEXT];

/* id of the instance of a level (or parent level) from the spatial loops above it */
static long inst_of(int lvl, const int *V, const int *zero_mask) {
    long id = 0;
    for (int l = 0; l < NL; l++)
        if (L_SPATIAL[l] && L_ABOVE[lvl][l]) id = id * L_BOUND[l] + ((zero_mask && zero_mask[l]) ? 0 : V[l]);
    return id;
}

static long long step_of(int lvl, const int *V) {
    long long id = 0;
    for (int l = 0; l < NL; l++)
        if (!L_SPATIAL[l] && L_ABOVE[lvl][l]) id = id * L_BOUND[l] + V[l];
    return id;
}

static long lineage_of(const bufd_t *b, const int *V) {
    long id = 0;
    for (int l = 0; l < NL; l++)
        if (b->lineage[l]) id = id * L_BOUND[l] + V[l];
    return id;
}

static int tile_of(const bufd_t *b, const int *V, int *lo, int *n) {
    int ne = 1;
    for (int d = 0; d < ND; d++) lo[d] = 0;
    for (int k = 0; k < b->nabove; k++) { int l = b->above[k]; lo[L_DIM[l]] += V[l] * L_STRIDE[l]; }
    for (int d = 0; d < ND; d++) {
        int r = SIZE[d] - lo[d];
        n[d] = b->E[d] < r ? b->E[d] : r;
        if (n[d] <= 0) ne = 0;
    }
    return ne;
}

/* mark the values of every axis of the tile (lo, n); returns the element count */
static long mark(const bufd_t *b, const int *lo, const int *n, unsigned char mk[MAXAX][MAXEXT], int *cnt, int list) {
    long total = 1;
    for (int a = 0; a < b->naxes; a++) {
        int x[MAXT]; int nt = b->nt[a]; int c = 0;
        for (int t = 0; t < nt; t++) x[t] = 0;
        for (;;) {
            int v = 0;
            for (int t = 0; t < nt; t++) v += b->tc[a][t] * (lo[b->td[a][t]] + x[t]);
            if (!mk[a][v]) { mk[a][v] = 1; if (list) VALS[a][c] = v; c++; }
            int t = nt - 1;
            while (t >= 0 && ++x[t] == n[b->td[a][t]]) { x[t] = 0; t--; }
            if (t < 0) break;
        }
        cnt[a] = c; total *= c;
    }
    return total;
}

/* is point v moved? not when it lies in the generated halo of an axis the tile spans whole */
static int moved_pt(const bufd_t *b, const int *v) {
    for (int a = 0; a < b->naxes; a++)
        if (b->skip[a] && (v[a] < b->pad[a] || v[a] >= b->pad[a] + b->shape[a])) return 0;
    return 1;
}

static void unmark(const bufd_t *b, const int *lo, const int *n, unsigned char mk[MAXAX][MAXEXT]) {
    for (int a = 0; a < b->naxes; a++) {
        int lo_v = 0, hi_v = 0;
        for (int t = 0; t < b->nt[a]; t++) {
            lo_v += b->tc[a][t] * lo[b->td[a][t]];
            hi_v += b->tc[a][t] * (lo[b->td[a][t]] + n[b->td[a][t]] - 1);
        }
        memset(&mk[a][lo_v], 0, (size_t)(hi_v - lo_v + 1));
    }
}

static long slot_of(const int *box, const long *pitch, int naxes, const int *v) {
    long s = 0;
    for (int a = 0; a < naxes; a++) s += (long)(v[a] % box[a]) * pitch[a];
    return s;
}

/* address of element v in the parent, or NULL for a padding position of the tensor */
static char *parent_elem(const bufd_t *b, char *pbase, const int *v) {
    if (b->parent_top) {
        long off = 0;
        for (int a = 0; a < b->naxes; a++) {
            int s = v[a] - b->pad[a];
            if (s < 0 || s >= b->shape[a]) return 0;
            off += (long)s * b->tstride[a];
        }
        return pbase + off * b->esize;
    }
    return pbase + slot_of(b->pbox, b->ppitch, b->naxes, v) * b->esize;
}

/* iterate the points of the tile listed in VALS (cnt per axis); call fn on those not in `other` */
#define FOR_POINTS(b, cnt, other_ne, other, BODY) do { \
    int ix_[MAXAX]; int v_[MAXAX]; \
    for (int a_ = 0; a_ < (b)->naxes; a_++) ix_[a_] = 0; \
    for (;;) { \
        int in_other_ = (other_ne); \
        for (int a_ = 0; a_ < (b)->naxes; a_++) { v_[a_] = VALS[a_][ix_[a_]]; if (!other[a_][v_[a_]]) in_other_ = 0; } \
        if (!in_other_) { BODY } \
        int a_ = (b)->naxes - 1; \
        while (a_ >= 0 && ++ix_[a_] == (cnt)[a_]) { ix_[a_] = 0; a_--; } \
        if (a_ < 0) break; \
    } } while (0)

/* output elements of the old tile that the new tile does not hold go up to the parent */
static void drain_leaving(const bufd_t *b, tstate_t *s, char *buf, char *pbase, const int *lo, const int *n, int ne) {
    if (!s->ne || s->drained) return;
    int cnt_old[MAXAX], cnt_new[MAXAX];
    if (ne) mark(b, lo, n, MK_NEW, cnt_new, 0);
    mark(b, s->lo, s->n, MK_OLD, cnt_old, 1);
    long long nd = 0;
    FOR_POINTS(b, cnt_old, ne, MK_NEW, {
        acc_t *src = (acc_t *)(buf + slot_of(b->box, b->pitch, b->naxes, v_) * b->esize);
        acc_t *dst = (acc_t *)parent_elem(b, pbase, v_);
        *dst += *src; *src = 0; nd++;
    });
    CNT[b->lvl][b->op][DRAINS] += nd;
    unmark(b, s->lo, s->n, MK_OLD);
    if (ne) unmark(b, lo, n, MK_NEW);
    s->drained = 1;
}

/* one instance of level b->lvl reaches its tile for the current step */
static void visit(const bufd_t *b, tstate_t *st, char *bufs, char *pbufs, char *tensor, const int *V,
                  long long *stamp, long *cov, unsigned char *touched, long nout, const long *ostride) {
    int lo[ND], n[ND];
    int ne = tile_of(b, V, lo, n);
    long inst = inst_of(b->lvl, V, 0);
    tstate_t *s = &st[inst];
    char *buf = bufs + inst * b->ring * b->esize;
    if (ne && s->ne && !memcmp(lo, s->lo, sizeof lo) && !memcmp(n, s->n, sizeof n)) {
        /* the same tile again (a stationary operand): nothing drains, nothing moves, no counter changes;
           only the group's coverage restarts at a new step, as below */
        long g = inst_of(b->lvl, V, b->collapsed);
        for (int l = 0; l < NL; l++) if (b->inner[l]) g = g * L_BOUND[l] + V[l];
        long long step = step_of(b->lvl, V);
        if (stamp[g] != step) { stamp[g] = step; cov[g] = 0; }
        s->drained = 0;
        return;
    }
    char *pbase = b->parent_top ? tensor : pbufs + inst_of(b->plvl, V, 0) * b->pring * b->esize;
    if (b->is_out) drain_leaving(b, s, buf, pbase, lo, n, ne);
    int fresh = ne && !s->ne;
    if (ne) {
        int cnt_new[MAXAX], cnt_old[MAXAX];
        if (s->ne) mark(b, s->lo, s->n, MK_OLD, cnt_old, 0);
        long full = mark(b, lo, n, MK_NEW, cnt_new, 1);
        long delta = 0;
        FOR_POINTS(b, cnt_new, s->ne, MK_OLD, { delta += moved_pt(b, v_); });
        if (b->anyskip) { full = 0; FOR_POINTS(b, cnt_new, 0, MK_OLD, { full += moved_pt(b, v_); }); }
        /* the group is every instance that differs only in collapsed loops; one parent transfer
           serves the union of what its members need (all non-empty members hold the same tile) */
        long need = fresh ? full : delta;
        /* members of a group take their turns one after another, each running the temporal loops
           inside the outermost collapsed loop: coverage is kept per (group, inner step) */
        long g = inst_of(b->lvl, V, b->collapsed);
        for (int l = 0; l < NL; l++) if (b->inner[l]) g = g * L_BOUND[l] + V[l];
        long long step = step_of(b->lvl, V);
        if (stamp[g] != step) { stamp[g] = step; cov[g] = 0; }
        int fetch = need > cov[g];
        long group_new = fetch ? need - cov[g] : 0;
        if (fetch) cov[g] = need;
        if (!b->is_out) {
            FOR_POINTS(b, cnt_new, s->ne, MK_OLD, {
                char *dst = buf + slot_of(b->box, b->pitch, b->naxes, v_) * b->esize;
                char *src = parent_elem(b, pbase, v_);
                if (src) memcpy(dst, src, (size_t)b->esize); else memset(dst, 0, (size_t)b->esize);
            });
            CNT[b->lvl][b->op][FILLS] += delta;
            CNT[b->plvl][b->op][READS] += group_new;
        } else {
            unsigned char *tch = touched + lineage_of(b, V) * nout;
            long long fetched = 0;
            FOR_POINTS(b, cnt_new, s->ne, MK_OLD, {
                acc_t *dst = (acc_t *)(buf + slot_of(b->box, b->pitch, b->naxes, v_) * b->esize);
                *dst = 0;
                if (fetch) {
                    long o = 0;
                    for (int a_ = 0; a_ < b->naxes; a_++) o += (long)v_[a_] * ostride[a_];
                    if (tch[o]) { acc_t *src = (acc_t *)parent_elem(b, pbase, v_); *dst = *src; *src = 0; fetched++; }
                    else tch[o] = 1;
                }
            });
            CNT[b->lvl][b->op][FILLS] += fetched;
            CNT[b->plvl][b->op][READS] += fetched;
            CNT[b->plvl][b->op][UPDATES] += group_new;
        }
        unmark(b, lo, n, MK_NEW);
        if (s->ne) unmark(b, s->lo, s->n, MK_OLD);
    }
    memcpy(s->lo, lo, sizeof lo); memcpy(s->n, n, sizeof n);
    s->ne = (char)ne; s->drained = 0;
}

/* before a loop above level b->lvl advances: every instance drains what its next tile drops */
static void predrain(const bufd_t *b, tstate_t *st, char *bufs, char *pbufs, char *tensor, const int *Vin, int k) {
    int V[NL]; int sp[NL]; int nsp = 0;
    for (int l = 0; l < NL; l++) {
        V[l] = Vin[l];
        if (l > k && !L_SPATIAL[l] && L_ABOVE[b->lvl][l]) V[l] = 0;
        /* instances of spatial loops outside loop k reach this transition on their own turn */
        if (l > k && L_SPATIAL[l] && L_ABOVE[b->lvl][l]) { sp[nsp++] = l; V[l] = 0; }
    }
    for (;;) {
        int lo[ND], n[ND];
        int ne = tile_of(b, V, lo, n);
        long inst = inst_of(b->lvl, V, 0);
        char *pbase = b->parent_top ? tensor : pbufs + inst_of(b->plvl, V, 0) * b->pring * b->esize;
        drain_leaving(b, &st[inst], bufs + inst * b->ring * b->esize, pbase, lo, n, ne);
        int t = nsp - 1;
        while (t >= 0 && ++V[sp[t]] == L_BOUND[sp[t]]) { V[sp[t]] = 0; t--; }
        if (t < 0) break;
    }
}

/* end of the nest: everything still resident goes up */
static void flush(const bufd_t *b, tstate_t *st, char *bufs, char *pbufs, char *tensor, long ninst) {
    int V[NL]; int sp[NL]; int nsp = 0;
    for (int l = 0; l < NL; l++) {
        V[l] = 0;
        if (L_SPATIAL[l] && L_ABOVE[b->lvl][l]) sp[nsp++] = l;
    }
    (void)ninst;
    for (;;) {
        long inst = inst_of(b->lvl, V, 0);
        char *pbase = b->parent_top ? tensor : pbufs + inst_of(b->plvl, V, 0) * b->pring * b->esize;
        int lo[ND] = {0}, n[ND] = {0};
        drain_leaving(b, &st[inst], bufs + inst * b->ring * b->esize, pbase, lo, n, 0);
        int t = nsp - 1;
        while (t >= 0 && ++V[sp[t]] == L_BOUND[sp[t]]) { V[sp[t]] = 0; t--; }
        if (t < 0) break;
    }
}
"""
