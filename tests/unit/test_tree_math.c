/*
 * Exhaustive checks of the tree arithmetic (src/coll/tree.h) for every rank
 * count 1..64 and every root.
 */
#include <criterion/criterion.h>
#include <string.h>
#include "coll/tree.h"

#define MAX_P 64

/* Every rank but root has one parent, and that parent lists it as a child. */
Test(tree_math, binomial_parent_child_agree)
{
    for (int p = 1; p <= MAX_P; p++) {
        for (int root = 0; root < p; root++) {
            int nparent_refs[MAX_P] = {0};

            cr_assert_eq(coll_binomial_parent(root, root, p), -1, "p=%d root=%d", p, root);
            for (int r = 0; r < p; r++) {
                int n = coll_binomial_nchildren(r, root, p);

                for (int i = 0; i < n; i++) {
                    int c = coll_binomial_child(r, root, p, i);

                    cr_assert(c >= 0 && c < p && c != root, "p=%d root=%d r=%d c=%d", p, root,
                              r, c);
                    cr_assert_eq(coll_binomial_parent(c, root, p), r, "p=%d root=%d c=%d", p,
                                 root, c);
                    nparent_refs[c]++;
                }
                if (r != root) {
                    int par = coll_binomial_parent(r, root, p);

                    cr_assert(par >= 0 && par < p && par != r, "p=%d root=%d r=%d", p, root, r);
                }
            }
            for (int r = 0; r < p; r++)
                cr_assert_eq(nparent_refs[r], r == root ? 0 : 1, "p=%d root=%d r=%d", p, root, r);
        }
    }
}

/* Following parents from any rank reaches root in at most log2(p) + 1 hops. */
Test(tree_math, binomial_connected_acyclic_shallow)
{
    for (int p = 1; p <= MAX_P; p++) {
        int depth_max = 0;

        while ((1 << depth_max) < p)
            depth_max++;
        for (int root = 0; root < p; root++) {
            for (int r = 0; r < p; r++) {
                int x = r, hops = 0;

                while (x != root && hops <= depth_max) {
                    x = coll_binomial_parent(x, root, p);
                    hops++;
                }
                cr_assert_eq(x, root, "p=%d root=%d r=%d does not reach root", p, root, r);
                cr_assert(hops <= depth_max, "p=%d r=%d depth %d", p, r, hops);
            }
        }
    }
}

/* Subtree sizes add up: 1 + sum over children, and the root's is p. */
Test(tree_math, binomial_subtree_sizes)
{
    for (int p = 1; p <= MAX_P; p++) {
        for (int root = 0; root < p; root++) {
            cr_assert_eq(coll_binomial_subtree_size(root, root, p), p);
            for (int r = 0; r < p; r++) {
                int n = coll_binomial_nchildren(r, root, p), sum = 1;

                for (int i = 0; i < n; i++) {
                    int c = coll_binomial_child(r, root, p, i);
                    int cs = coll_binomial_subtree_size(c, root, p);

                    sum += cs;
                    /* child i heads at most 2^i ranks; only the last may be cut short */
                    cr_assert(cs <= (1 << i) && (cs == (1 << i) || i == n - 1),
                              "p=%d root=%d r=%d i=%d cs=%d", p, root, r, i, cs);
                }
                cr_assert_eq(coll_binomial_subtree_size(r, root, p), sum, "p=%d root=%d r=%d", p,
                             root, r);
            }
        }
    }
}

Test(tree_math, pow2)
{
    cr_assert_eq(coll_rd_pow2(1), 1);
    for (int p = 1; p <= 1000; p++) {
        int p2 = coll_rd_pow2(p);

        cr_assert(p2 <= p && 2 * p2 > p && (p2 & (p2 - 1)) == 0, "p=%d p2=%d", p, p2);
    }
}

/* Survivors are numbered 0..p2-1 once each; folded ranks pair with a survivor. */
Test(tree_math, rd_fold)
{
    for (int p = 1; p <= MAX_P; p++) {
        int p2 = coll_rd_pow2(p), seen[MAX_P] = {0}, nsurv = 0;

        for (int r = 0; r < p; r++) {
            int nr = coll_rd_newrank(r, p), f = coll_rd_fold_peer(r, p);

            if (nr < 0) {
                cr_assert(f >= 0 && f == r - 1, "p=%d r=%d", p, r);
                cr_assert(coll_rd_newrank(f, p) >= 0);
                continue;
            }
            cr_assert(nr < p2, "p=%d r=%d nr=%d", p, r, nr);
            cr_assert_eq(seen[nr], 0);
            seen[nr] = 1;
            nsurv++;
            cr_assert_eq(coll_rd_oldrank(nr, p), r, "p=%d r=%d", p, r);
            if (f >= 0) {
                cr_assert_eq(f, r + 1);
                cr_assert_eq(coll_rd_newrank(f, p), -1);
                cr_assert_eq(coll_rd_fold_peer(f, p), r);
            }
        }
        cr_assert_eq(nsurv, p2, "p=%d", p);
        cr_assert_eq(p - p2, p - nsurv);
    }
}

/* Partners are symmetric, distinct and survivors; doubling reaches everyone. */
Test(tree_math, rd_partners)
{
    for (int p = 1; p <= MAX_P; p++) {
        int p2 = coll_rd_pow2(p);

        for (int v = 0; v < p2; v++) {
            unsigned long long reach = 1ULL << v;

            for (int mask = 1; mask < p2; mask <<= 1) {
                int q = coll_rd_partner(v, mask, p);
                int qv = coll_rd_newrank(q, p);
                unsigned long long add = 0;

                cr_assert(qv >= 0 && qv != v, "p=%d v=%d mask=%d", p, v, mask);
                cr_assert_eq(coll_rd_partner(qv, mask, p), coll_rd_oldrank(v, p));
                /* what v knows after this step: its set and the partner's (shifted) */
                for (int b = 0; b < p2; b++)
                    if (reach & (1ULL << b))
                        add |= 1ULL << (b ^ mask);
                reach |= add;
            }
            cr_assert_eq(reach, p2 == 64 ? ~0ULL : (1ULL << p2) - 1, "p=%d v=%d", p, v);
        }
    }
}

Test(tree_math, block_offsets)
{
    size_t counts[] = {0, 1, 2, 7, 63, 64, 65, 1023, 100003};

    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        size_t n = counts[ci];

        for (int nb = 1; nb <= MAX_P; nb++) {
            cr_assert_eq(coll_tree_block_offset(n, nb, 0), 0);
            cr_assert_eq(coll_tree_block_offset(n, nb, nb), n, "n=%zu nb=%d", n, nb);
            for (int b = 0; b < nb; b++) {
                size_t len =
                    coll_tree_block_offset(n, nb, b + 1) - coll_tree_block_offset(n, nb, b);

                cr_assert(len == n / nb || len == n / nb + 1, "n=%zu nb=%d b=%d", n, nb, b);
            }
        }
    }
}

/*
 * Halving: partners hold the same blocks before each step and keep
 * complementary halves; after the last step survivor v holds block v.
 */
Test(tree_math, halving_ranges)
{
    for (int p = 1; p <= MAX_P; p++) {
        int p2 = coll_rd_pow2(p);

        for (int v = 0; v < p2; v++) {
            int lo, hi, klo, khi, plo, phi;

            if (p2 > 1) {
                coll_halving_held(v, p2 / 2, &lo, &hi);
                cr_assert(lo == 0 && hi == p2);
            }
            for (int mask = p2 / 2; mask >= 1; mask >>= 1) {
                int u = v ^ mask;

                coll_halving_held(v, mask, &lo, &hi);
                coll_halving_held(u, mask, &plo, &phi);
                cr_assert(lo == plo && hi == phi, "p2=%d v=%d mask=%d", p2, v, mask);
                coll_halving_kept(v, mask, &klo, &khi);
                coll_halving_kept(u, mask, &plo, &phi);
                cr_assert(klo >= lo && khi <= hi && khi - klo == mask);
                cr_assert(klo == phi || khi == plo, "halves must be complementary");
                cr_assert(v >= klo && v < khi);
                if (mask > 1) {
                    int nlo, nhi;

                    coll_halving_held(v, mask / 2, &nlo, &nhi);
                    cr_assert(nlo == klo && nhi == khi);
                }
            }
            coll_halving_kept(v, 1, &klo, &khi);
            if (p2 > 1)
                cr_assert(klo == v && khi == v + 1);
        }
    }
}

Test(tree_math, chunk_elems_and_tags)
{
    cr_assert_eq(coll_tree_chunk_elems(0, 4, 4096), 1024);
    cr_assert_eq(coll_tree_chunk_elems(100, 4, 0), 100);
    cr_assert_eq(coll_tree_chunk_elems(0, 4, 0), 1);
    cr_assert_eq(coll_tree_chunk_elems(100, 8, 3), 1);
    /* huge counts get larger chunks so the chunk index fits its tag field */
    size_t big = (size_t)1 << 40;
    size_t ce = coll_tree_chunk_elems(big, 1, 1);

    cr_assert((big + ce - 1) / ce <= COLL_TREE_TAG_MAX_CHUNKS, "ce=%zu", ce);
    cr_assert_neq(coll_tree_tag(1, 0, 5), coll_tree_tag(2, 0, 5));
    cr_assert_neq(coll_tree_tag(1, 1, 5), coll_tree_tag(1, 2, 5));
    cr_assert_neq(coll_tree_tag(1, 1, 5), coll_tree_tag(1, 1, 6));
    cr_assert_eq(coll_tree_tag(15, 63, COLL_TREE_TAG_MAX_CHUNKS - 1), UINT32_MAX);
}

Test(tree_math, deps_pack)
{
    long out[COLL_STEP_MAX_DEPS];

    cr_assert_eq(coll_tree_deps(out, -1, -1, -1, -1), 0);
    cr_assert_eq(coll_tree_deps(out, -1, 7, -1, 3), 2);
    cr_assert(out[0] == 7 && out[1] == 3);
    cr_assert_eq(coll_tree_deps(out, 0, 1, 2, 3), 4);
    cr_assert(out[0] == 0 && out[3] == 3);
}
