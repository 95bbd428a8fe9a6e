/*
 * Shared by test_attack.c (the store's side) and attack_peers.c (the
 * legitimate ranks and the attackers, in a process of their own).
 */
#ifndef CHORUS_TEST_ATTACK_PEERS_H
#define CHORUS_TEST_ATTACK_PEERS_H

#include <stddef.h>

/* Distinctive, so that any log line carrying it (or its hex) is found. */
#define SECRET       "attack-test-secret-Zq8vW3kP"
#define WRONG_SECRET "attack-test-wrong-secret-Jm4xR7"
#define STORE_HOST   "127.0.0.2"
#define TL_HOST      "127.0.0.3"
#define BLOB_LEN     24
#define NRANKS       4
#define IDLE         64

/* Reads one line (without its newline) from fd before deadline; 0, or -1 on EOF or timeout. */
int attack_read_line(int fd, char *buf, size_t len, double deadline);

/*
 * The attacking process. Reads the store's address from from_parent, then
 * writes "joining" once ranks 0 and 1 sent their JOINs and waits for
 * "attack"; writes "attack-start" and "attack-end" around the attacks and
 * waits for "go" before ranks 2 and 3 join; ends with "done N" (N failures).
 * Returns the process's exit code.
 */
int attack_world_main(int from_parent, int to_parent);

#endif
