/*
 * chorus-run: runs N ranks of a program on this machine, with the CHORUS_*
 * variables that chorus_comm_create_from_env() reads. See launch.h for what
 * the ranks see and how failures and signals are handled.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/launch.h"
#include "tools/tool_version.h"

static const char *const usage_text =
    "usage: chorus-run [-n N | -np N] [--prefix|-p] [--bind B] [--timeout S] PROGRAM "
    "[ARGS...]\n"
    "       chorus-run --help | --version\n"
    "\n"
    "Runs N copies (ranks) of PROGRAM on this machine and waits for all of them.\n"
    "\n"
    "  -n N, -np N    number of ranks, 1..%d (default 1)\n"
    "  -p, --prefix   prefix every line the ranks print with \"[rank] \"\n"
    "  --bind B       core: each rank on one CPU of chorus-run's own, in turn; none:\n"
    "                 wherever chorus-run may run; auto (default): core when the\n"
    "                 ranks are at most its CPUs, else none\n"
    "  --timeout S    terminate the job after S seconds (exit code 124)\n"
    "  -h, --help     print this help\n"
    "  --version      print the version of chorus-run\n"
    "  --             end of options\n"
    "\n"
    "Each rank gets CHORUS_RANK, CHORUS_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_SIZE,\n"
    "CHORUS_ADDR (127.0.0.1 and a free port) and CHORUS_SECRET (random, new for\n"
    "every job); values of these variables in chorus-run's own environment are\n"
    "replaced. Ranks read stdin from /dev/null.\n"
    "\n"
    "When a rank exits with a non-zero code or is killed by a signal, the other\n"
    "ranks get SIGTERM, then SIGKILL %g seconds later. SIGINT, SIGTERM and SIGHUP\n"
    "sent to chorus-run are forwarded to the ranks. The exit code is that of the\n"
    "first rank that failed (128 + N for signal N), or 0.\n";

static void usage(FILE *f)
{
    fprintf(f, usage_text, LAUNCH_MAX_RANKS, LAUNCH_DEFAULT_GRACE_S);
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "chorus-run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'chorus-run --help'.\n");
    return 2;
}

static int parse_timeout(const char *text, double *timeout_p)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v) || v <= 0 || v > 1e9)
        return -1;
    *timeout_p = v;
    return 0;
}

int main(int argc, char **argv)
{
    launch_opts_t opts = {.nranks = 1, .progname = "chorus-run"};
    int i;

    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            tool_version_print(stdout, "chorus-run", NULL);
            return 0;
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--prefix") == 0) {
            opts.prefix = 1;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "-np") == 0) {
            if (i + 1 >= argc)
                return bad_usage("option %s needs a rank count", a);
            if (launch_parse_nranks(argv[++i], &opts.nranks) != 0) {
                fprintf(stderr, "chorus-run: invalid rank count '%s' for %s: expected an "
                        "integer from 1 to %d\n", argv[i], a, LAUNCH_MAX_RANKS);
                return 2;
            }
        } else if (strcmp(a, "--bind") == 0) {
            if (i + 1 >= argc)
                return bad_usage("option %s needs core, none or auto", a);
            if (launch_parse_bind(argv[++i], &opts.bind) != 0)
                return bad_usage("invalid binding '%s': expected core, none or auto", argv[i]);
        } else if (strcmp(a, "--timeout") == 0) {
            if (i + 1 >= argc)
                return bad_usage("option %s needs a number of seconds", a);
            if (parse_timeout(argv[++i], &opts.timeout_s) != 0)
                return bad_usage("invalid timeout '%s': expected seconds > 0", argv[i]);
        } else {
            return bad_usage("unknown option '%s'", a);
        }
    }
    if (i >= argc)
        return bad_usage("%s", "no program to run");
    return launch_run(&opts, argv + i);
}
