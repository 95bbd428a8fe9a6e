/*
 * What this process holds: its threads and peak resident memory (from
 * /proc/self) and its TCP sockets with their ports and states (its
 * descriptors, each asked what it is). The tests of
 * sub-communicators compare these before and after, and the transport tests
 * bound them.
 */
#ifndef CHORUS_TEST_PROC_RES_H
#define CHORUS_TEST_PROC_RES_H

/* States of a TCP socket, as the kernel numbers them (TCP_INFO, /proc/net/tcp). */
#define PROC_TCP_ESTABLISHED 0x01
#define PROC_TCP_LISTEN 0x0a

typedef struct {
    unsigned local_port;
    unsigned remote_port;
    int state;                  /* PROC_TCP_* or another of the kernel's states */
} proc_tcp_sock_t;

/* The entries of a directory, "." and ".." aside, or -1 when it cannot be read. */
int proc_dir_entries(const char *path);

/* The number of threads of this process, or -1. */
int proc_thread_count(void);

/*
 * This process's TCP sockets over IPv4 and IPv6: the first max of them into
 * out (which may be NULL when max is 0); returns how many there are, or -1.
 */
int proc_tcp_sockets(proc_tcp_sock_t *out, int max);

/* Peak resident memory (VmHWM) of this process in KiB, or -1. */
long proc_vm_hwm_kib(void);

/* Mappings of this process whose line in /proc/self/maps holds name, or -1. */
int proc_mappings_named(const char *name);

#endif
