/*
 * The JSON reader and writer (src/util/json.c) that chorus-trace and the
 * trace tests read trace files with: values of every kind, escapes, errors
 * with their line and column, the depth bound, and writing back.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"

static chorus__json_t *parse_ok(const char *text)
{
    chorus__json_t *v = NULL;
    char err[160] = "";

    cr_assert_eq(chorus__json_parse(text, strlen(text), &v, err, sizeof(err)), CHORUS_OK,
                 "'%s' refused: %s", text, err);
    return v;
}

static void expect_error(const char *text, const char *says)
{
    chorus__json_t *v = (chorus__json_t *)&v;
    char err[160] = "";

    cr_expect_eq(chorus__json_parse(text, strlen(text), &v, err, sizeof(err)),
                 CHORUS_ERR_INVALID_ARG, "'%s' accepted", text);
    cr_expect_eq(v, (chorus__json_t *)&v, "'%s': value written on failure", text);
    cr_expect(strstr(err, says) != NULL, "'%s': error '%s', expected '%s'", text, err, says);
}

Test(json, reads_every_kind_of_value)
{
    chorus__json_t *v = parse_ok(" {\"a\": [1, -2.5e3, true, false, null], \"b\": {\"c\": \"d\"},"
                                 " \"e\": []}\n");
    const chorus__json_t *a = chorus__json_get(v, "a");

    cr_assert(v->type == CHORUS__JSON_OBJECT && v->n == 3);
    cr_assert(a != NULL && a->type == CHORUS__JSON_ARRAY && a->n == 5);
    cr_expect_eq(a->items[0].number, 1);
    cr_expect_eq(a->items[1].number, -2500);
    cr_expect(a->items[2].type == CHORUS__JSON_BOOL && a->items[2].boolean == 1);
    cr_expect(a->items[3].type == CHORUS__JSON_BOOL && a->items[3].boolean == 0);
    cr_expect_eq(a->items[4].type, CHORUS__JSON_NULL);
    cr_expect_str_eq(chorus__json_string(chorus__json_get(v, "b"), "c"), "d");
    cr_expect_eq(chorus__json_get(v, "e")->n, 0);
    cr_expect_null(chorus__json_get(v, "missing"));
    cr_expect_null(chorus__json_get(a, "a"), "an array has no members");
    cr_expect_eq(chorus__json_number(v, "b", 7), 7, "not a number: the fallback");
    chorus__json_free(v);
}

Test(json, decodes_escapes)
{
    chorus__json_t *v = parse_ok("\"q\\\" b\\\\ s\\/ \\n\\t \\u00e9 \\ud83d\\ude00\"");

    cr_expect_str_eq(v->string, "q\" b\\ s/ \n\t \xc3\xa9 \xf0\x9f\x98\x80");
    chorus__json_free(v);
    /* A high surrogate followed by another escape: that escape is kept. */
    v = parse_ok("\"\\ud800\\u0041\"");
    cr_expect(strstr(v->string, "A") != NULL, "the escape after a lone surrogate was lost");
    chorus__json_free(v);
}

Test(json, says_where_the_text_went_wrong)
{
    expect_error("", "line 1, column 1: unexpected end");
    expect_error("{\"a\":1,\n \"b\" 2}", "line 2, column 6: expected ':'");
    expect_error("[1, 2", "expected ',' or ']'");
    expect_error("[1] x", "text after the value");
    expect_error("{1: 2}", "expected a member name");
    expect_error("\"abc", "unterminated string");
    expect_error("\"a\nb\"", "control character");
    expect_error("\"\\x\"", "bad escape");
    expect_error("\"\\u12g4\"", "bad \\u escape");
    expect_error("\"\\u0000\"", "NUL");
    expect_error("tru", "expected 'true'");
    expect_error("-", "expected a value");
    expect_error("1.2.3", "malformed number");
    expect_error("1e999", "malformed number");
}

/* depth brackets opened, then closed, into buf. */
static void nest(char *buf, int depth)
{
    for (int i = 0; i < depth; i++) {
        buf[i] = '[';
        buf[2 * depth - 1 - i] = ']';
    }
    buf[2 * depth] = '\0';
}

Test(json, bounds_the_depth)
{
    char text[2 * (CHORUS__JSON_DEPTH_MAX + 1) + 1];

    nest(text, CHORUS__JSON_DEPTH_MAX + 1);
    expect_error(text, "nested deeper than");
    nest(text, CHORUS__JSON_DEPTH_MAX);
    chorus__json_free(parse_ok(text));
}

Test(json, writes_what_it_read)
{
    const char *text = "{\"s\":\"a\\\"b\\u0001\",\"n\":[0.1,12118200121.277,-3,1e+300],"
                       "\"t\":true,\"z\":null,\"o\":{}}";
    chorus__json_t *v = parse_ok(text);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    cr_assert_not_null(f);
    chorus__json_write(f, v);
    fclose(f);
    cr_expect_str_eq(out, text);
    chorus__json_free(v);
    free(out);
}
