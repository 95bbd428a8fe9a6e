/*
 * Shared-memory regions: what shm_region_create hands out (a memfd owned
 * by this user only, no file in /dev/shm), who may open it through /proc,
 * the token check of shm_node_create, whether posts may skip their fence,
 * and the slot-size bounds.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/dev_shm.h"
#include "transports/shm/shm_internal.h"
#include "util/fence.h"

#define NOBODY 65534

/* Exit codes of the forked children. */
enum { CHILD_OK = 0, CHILD_OPENED = 10, CHILD_WRONG_ERRNO = 11, CHILD_SETUP = 12,
       CHILD_WRONG_STATUS = 13 };

static shm_config_t default_cfg(void)
{
    shm_config_t cfg = {.enabled = 1, .slot_bytes = 4096, .cma = 0, .nt_bytes = 8 << 20,
                        .spin = 100};
    return cfg;
}

static dev_shm_list_t before, after;

Test(shm_region, memfd_owner_only_not_in_dev_shm)
{
    shm_config_t cfg = default_cfg();
    shm_region_t *region = NULL;
    shm_card_t card;
    struct stat st;
    char path[64], target[256];
    ssize_t len;

    cr_assert_eq(dev_shm_list(&before), 0, "cannot list /dev/shm");
    cr_assert_eq(shm_region_create(&cfg, &region, &card), CHORUS_OK);
    cr_assert_not_null(region);
    cr_assert_eq(card.pid, (int32_t)getpid());
    cr_assert_geq(card.fd, 0);
    cr_assert_eq(fstat(card.fd, &st), 0, "fstat of the region's fd: %s", strerror(errno));
    cr_expect(S_ISREG(st.st_mode), "mode %o is not a regular file", (unsigned)st.st_mode);
    cr_expect_eq(st.st_mode & 07777, 0600, "region mode is %o, not 600",
                 (unsigned)(st.st_mode & 07777));
    cr_expect_eq(st.st_uid, getuid());
    cr_expect_eq((size_t)st.st_size, SHM_DATA_OFFSET + 2 * cfg.slot_bytes,
                 "region is %lld bytes", (long long)st.st_size);
    /* A memfd's /proc link reads "/memfd:<name> (deleted)": it has no path anywhere. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", card.fd);
    len = readlink(path, target, sizeof(target) - 1);
    cr_assert_gt(len, 0);
    target[len] = '\0';
    cr_expect_eq(strncmp(target, "/memfd:", 7), 0, "region fd is %s, not a memfd", target);
    cr_expect_eq(fcntl(card.fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC, "region fd lacks CLOEXEC");

    cr_assert_eq(dev_shm_list(&after), 0, "cannot list /dev/shm");
    cr_expect_eq(dev_shm_new_entries(&before, &after, ""), 0, "/dev/shm has new entries");
    shm_region_destroy(region);
}

/* In a child that gave up root: opening the parent's region must be refused. */
static int open_as_nobody(const char *path)
{
    int fd;

    if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
        return CHILD_SETUP;
    fd = open(path, O_RDWR);
    if (fd >= 0) {
        close(fd);
        return CHILD_OPENED;
    }
    return errno == EACCES || errno == EPERM ? CHILD_OK : CHILD_WRONG_ERRNO;
}

static int wait_child(pid_t pid)
{
    int st;

    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "child ended by signal %d", WTERMSIG(st));
    return WEXITSTATUS(st);
}

Test(shm_region, other_user_cannot_open)
{
    shm_config_t cfg = default_cfg();
    shm_region_t *region = NULL;
    shm_card_t card;
    char path[64];
    pid_t pid;
    int fd, rc;

    if (geteuid() != 0)
        cr_skip_test("needs root to drop to uid/gid %d (running as uid %d)", NOBODY,
                     (int)geteuid());
    cr_assert_eq(shm_region_create(&cfg, &region, &card), CHORUS_OK);
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)card.pid, (int)card.fd);
    /* Control: the same path opens for the owner, so a refusal below means something. */
    fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0, "owner cannot open %s: %s", path, strerror(errno));
    close(fd);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(open_as_nobody(path));
    rc = wait_child(pid);
    shm_region_destroy(region);
    cr_expect_eq(rc, CHILD_OK, "uid %d on %s: child exit %d (10: opened, 11: wrong errno, "
                 "12: could not drop privileges)", NOBODY, path, rc);
}

/*
 * A child maps the parent's region as local rank 0 of a two-rank node;
 * flip_token says whether the card it is given carries a wrong token.
 */
static int child_node_create(const shm_card_t *parent_card, int flip_token)
{
    shm_config_t cfg = default_cfg();
    shm_region_t *own = NULL;
    shm_node_t *node = NULL;
    shm_card_t cards[2];
    chorus_status_t status;
    int cma = -1;

    if (shm_region_create(&cfg, &own, &cards[1]) != CHORUS_OK)
        return CHILD_SETUP;
    cards[0] = *parent_card;
    if (flip_token)
        cards[0].token[SHM_TOKEN_BYTES - 1] ^= 0x01;
    status = shm_node_create(own, cards, 1, 2, &cfg, &node, &cma);
    shm_node_destroy(node);
    if (flip_token)
        return status == CHORUS_ERR_SYSTEM && node == NULL ? CHILD_OK : CHILD_WRONG_STATUS;
    return status == CHORUS_OK && node != NULL && cma == 0 ? CHILD_OK : CHILD_WRONG_STATUS;
}

static void node_create_from_child(int flip_token)
{
    shm_config_t cfg = default_cfg();
    shm_region_t *region = NULL;
    shm_card_t card;
    pid_t pid;
    int rc;

    cr_assert_eq(shm_region_create(&cfg, &region, &card), CHORUS_OK);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(child_node_create(&card, flip_token));
    rc = wait_child(pid);
    shm_region_destroy(region);
    cr_expect_eq(rc, CHILD_OK, "shm_node_create with a %s token: child exit %d",
                 flip_token ? "wrong" : "right", rc);
}

Test(shm_region, node_create_right_token)
{
    node_create_from_child(0);
}

Test(shm_region, node_create_wrong_token_fails)
{
    node_create_from_child(1);
}

/* A child run on the card of a region the parent created with cfg; its exit code. */
typedef int (*region_child_fn)(const shm_card_t *parent_card, int a, int b);

static int run_region_child(const shm_config_t *cfg, region_child_fn child, int a, int b)
{
    shm_region_t *region = NULL;
    shm_card_t card;
    pid_t pid;
    int rc;

    cr_assert_eq(shm_region_create(cfg, &region, &card), CHORUS_OK);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(child(&card, a, b));
    rc = wait_child(pid);
    shm_region_destroy(region);
    return rc;
}

/*
 * In a child: map the parent's region (parent_card) as local rank 0 of a
 * two-rank node whose own region allows fenceless posts or not (membarrier).
 * CHILD_OK with *node_p, else the exit code.
 */
static int child_node(const shm_card_t *parent_card, int membarrier, shm_config_t *cfg,
                      shm_node_t **node_p)
{
    shm_region_t *own = NULL;
    shm_card_t cards[2];
    int cma = -1;

    *cfg = default_cfg();
    cfg->membarrier = membarrier;
    if (shm_region_create(cfg, &own, &cards[1]) != CHORUS_OK)
        return CHILD_SETUP;
    cards[0] = *parent_card;
    if (shm_node_create(own, cards, 1, 2, cfg, node_p, &cma) != CHORUS_OK)
        return CHILD_WRONG_STATUS;
    return CHILD_OK;
}

/*
 * A child that allows fenceless posts or not (child_fence) maps the
 * parent's region as rank 0 of a two-rank node: its posts skip the fence
 * only when both allow it and the kernel has node-wide barriers. Exit 0
 * when fence_ready is as expected.
 */
static int child_fence(const shm_card_t *parent_card, int allow, int want)
{
    shm_config_t cfg;
    shm_node_t *node = NULL;
    int rc = child_node(parent_card, allow, &cfg, &node), ready;

    if (rc != CHILD_OK)
        return rc;
    ready = node->fence_ready;
    shm_node_destroy(node);
    return ready == want ? CHILD_OK : CHILD_WRONG_STATUS;
}

Test(shm_region, posts_skip_their_fence_only_where_every_rank_allows_it)
{
    int kernel = chorus__fence_ready(CHORUS__FENCE_NODE);

    for (int parent = 0; parent < 2; parent++) {
        for (int child = 0; child < 2; child++) {
            shm_config_t cfg = default_cfg();
            int want = parent && child && kernel, rc;

            cfg.membarrier = parent;
            rc = run_region_child(&cfg, child_fence, child, want);
            cr_expect_eq(rc, CHILD_OK, "CHORUS_SHM_MEMBARRIER %d here and %d there (kernel "
                         "%s): fence_ready is not %d (child exit %d)", parent, child,
                         kernel ? "has node-wide barriers" : "has none", want, rc);
        }
    }
}

/*
 * A child maps the parent's region as rank 0 of a two-rank node that runs on
 * cores cores and seals it, both allowing fenceless posts: with a core each,
 * the node keeps its spin, its few yields and its fenceless posts; with fewer
 * cores than ranks, its waiters yield at once and longer, and its posts take
 * the fence. Exit 0 when the sealed node is so.
 */
static int child_seal(const shm_card_t *parent_card, int cores, int kernel)
{
    shm_config_t cfg;
    shm_node_t *node = NULL;
    int rc = child_node(parent_card, 1, &cfg, &node), ok, shared = cores < 2;

    if (rc != CHILD_OK)
        return rc;
    shm_node_seal(node, 0, cores);
    ok = node->fence_ready == (shared ? 0 : kernel) &&
         node->yields == (shared ? SHM_YIELDS_SHARED : SHM_YIELDS) &&
         node->spin_max == (shared ? 0 : cfg.spin);
    shm_node_destroy(node);
    return ok ? CHILD_OK : CHILD_WRONG_STATUS;
}

Test(shm_region, more_ranks_than_cores_fence_posts_and_yield_longer)
{
    int kernel = chorus__fence_ready(CHORUS__FENCE_NODE);

    for (int cores = 1; cores <= 2; cores++) {
        shm_config_t cfg = default_cfg();
        int rc;

        cfg.membarrier = 1;
        rc = run_region_child(&cfg, child_seal, cores, kernel);
        cr_expect_eq(rc, CHILD_OK, "two ranks sealed on %d core%s (kernel %s): not as "
                     "expected (child exit %d)", cores, cores > 1 ? "s" : "",
                     kernel ? "has node-wide barriers" : "has none", rc);
    }
}

/* Slot sizes out of bounds, given directly and through CHORUS_SHM_SLOT_SIZE. */
Test(shm_region, bad_slot_size)
{
    static const size_t bad[] = {0, 64, 100, 4032, 4097, 4096 + 32, (size_t)1 << 31};
    static const char *bad_env[] = {"100", "4097", "2G"};
    shm_config_t cfg = default_cfg();
    shm_region_t *region;
    shm_card_t card;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg.slot_bytes = bad[i];
        region = NULL;
        cr_expect_eq(shm_region_create(&cfg, &region, &card), CHORUS_ERR_INVALID_ARG,
                     "slot of %zu bytes accepted", bad[i]);
        cr_expect_null(region);
    }
    for (size_t i = 0; i < sizeof(bad_env) / sizeof(bad_env[0]); i++) {
        cr_assert_eq(setenv("CHORUS_SHM_SLOT_SIZE", bad_env[i], 1), 0);
        cr_assert_eq(chorus__config_read(&shm_config_table, &cfg), CHORUS_OK);
        region = NULL;
        cr_expect_eq(shm_region_create(&cfg, &region, &card), CHORUS_ERR_INVALID_ARG,
                     "CHORUS_SHM_SLOT_SIZE=%s accepted", bad_env[i]);
        cr_expect_null(region);
    }
    /* The bounds themselves are valid. */
    cr_assert_eq(setenv("CHORUS_SHM_SLOT_SIZE", "4K", 1), 0);
    cr_assert_eq(chorus__config_read(&shm_config_table, &cfg), CHORUS_OK);
    cr_assert_eq(cfg.slot_bytes, 4096);
    cr_assert_eq(shm_region_create(&cfg, &region, &card), CHORUS_OK);
    shm_region_destroy(region);
    unsetenv("CHORUS_SHM_SLOT_SIZE");
}
