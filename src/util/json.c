/* The JSON reader and writer (see json.h): recursive descent over the whole text. */
#include "util/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *text;
    size_t len;
    size_t pos;
    int depth;
    char *err;
    size_t errcap;
    int failed;
} json_reader_t;

static void json_fail(json_reader_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void json_fail(json_reader_t *r, const char *fmt, ...)
{
    size_t line = 1, column = 1, used;
    va_list ap;

    if (r->failed)
        return;
    r->failed = 1;
    for (size_t i = 0; i < r->pos && i < r->len; i++) {
        column = r->text[i] == '\n' ? 1 : column + 1;
        line += r->text[i] == '\n';
    }
    if (r->errcap == 0)
        return;
    used = (size_t)snprintf(r->err, r->errcap, "line %zu, column %zu: ", line, column);
    if (used >= r->errcap)
        return;
    va_start(ap, fmt);
    vsnprintf(r->err + used, r->errcap - used, fmt, ap);
    va_end(ap);
}

static void json_space(json_reader_t *r)
{
    while (r->pos < r->len && strchr(" \t\r\n", r->text[r->pos]) != NULL)
        r->pos++;
}

static int json_peek(json_reader_t *r)
{
    json_space(r);
    return r->pos < r->len ? (unsigned char)r->text[r->pos] : -1;
}

static int json_literal(json_reader_t *r, const char *word)
{
    size_t n = strlen(word);

    if (r->len - r->pos < n || memcmp(r->text + r->pos, word, n) != 0) {
        json_fail(r, "expected '%s'", word);
        return 0;
    }
    r->pos += n;
    return 1;
}

static int json_hex4(json_reader_t *r, unsigned *code)
{
    *code = 0;
    for (int i = 0; i < 4; i++, r->pos++) {
        int c = r->pos < r->len ? r->text[r->pos] : -1;

        *code <<= 4;
        if (c >= '0' && c <= '9')
            *code |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            *code |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            *code |= (unsigned)(c - 'A' + 10);
        else {
            json_fail(r, "bad \\u escape");
            return 0;
        }
    }
    return 1;
}

static size_t json_utf8(unsigned code, char *out)
{
    if (code < 0x80) {
        out[0] = (char)code;
        return 1;
    }
    if (code < 0x800) {
        out[0] = (char)(0xc0 | (code >> 6));
        out[1] = (char)(0x80 | (code & 0x3f));
        return 2;
    }
    if (code < 0x10000) {
        out[0] = (char)(0xe0 | (code >> 12));
        out[1] = (char)(0x80 | ((code >> 6) & 0x3f));
        out[2] = (char)(0x80 | (code & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (code >> 18));
    out[1] = (char)(0x80 | ((code >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((code >> 6) & 0x3f));
    out[3] = (char)(0x80 | (code & 0x3f));
    return 4;
}

/* One escape after the backslash into out; the bytes written, 0 on error. */
static size_t json_escape(json_reader_t *r, char *out)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    int c = r->pos < r->len ? r->text[r->pos++] : -1;
    const char *at = c > 0 ? strchr(from, c) : NULL;
    unsigned code, low;

    if (at != NULL && c != 'u') {
        out[0] = to[at - from];
        return 1;
    }
    if (c != 'u') {
        json_fail(r, "bad escape in a string");
        return 0;
    }
    if (!json_hex4(r, &code))
        return 0;
    if (code >= 0xd800 && code < 0xdc00 && r->len - r->pos >= 6 &&
        r->text[r->pos] == '\\' && r->text[r->pos + 1] == 'u') {
        r->pos += 2;
        if (!json_hex4(r, &low))
            return 0;
        if (low >= 0xdc00 && low < 0xe000)
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
        else
            r->pos -= 6;    /* not a pair: that escape is a character of its own */
    }
    if (code == 0) {
        json_fail(r, "a string holds a NUL character");
        return 0;
    }
    return json_utf8(code, out);
}

static char *json_string(json_reader_t *r)
{
    size_t start = ++r->pos, n = 0;
    char *out;

    /* Escapes only shrink, so the raw length bounds the decoded one. */
    while (r->pos < r->len && r->text[r->pos] != '"')
        r->pos += r->text[r->pos] == '\\' ? 2 : 1;
    if (r->pos >= r->len) {
        json_fail(r, "unterminated string");
        return NULL;
    }
    out = malloc(r->pos - start + 1);
    if (out == NULL) {
        json_fail(r, "out of memory");
        return NULL;
    }
    for (r->pos = start; r->text[r->pos] != '"';) {
        unsigned char c = (unsigned char)r->text[r->pos++];

        if (c < 0x20) {
            r->pos--;
            json_fail(r, "control character in a string");
            free(out);
            return NULL;
        }
        if (c != '\\') {
            out[n++] = (char)c;
            continue;
        }
        size_t k = json_escape(r, out + n);

        if (k == 0) {
            free(out);
            return NULL;
        }
        n += k;
    }
    r->pos++;
    out[n] = '\0';
    return out;
}

static int json_number(json_reader_t *r, double *number)
{
    size_t start = r->pos;
    char buf[64], *end;

    if (r->pos < r->len && r->text[r->pos] == '-')
        r->pos++;
    if (r->pos >= r->len || r->text[r->pos] < '0' || r->text[r->pos] > '9') {
        json_fail(r, "expected a value");
        return 0;
    }
    while (r->pos < r->len && strchr("0123456789+-.eE", r->text[r->pos]) != NULL)
        r->pos++;
    if (r->pos - start >= sizeof(buf)) {
        json_fail(r, "number too long");
        return 0;
    }
    memcpy(buf, r->text + start, r->pos - start);
    buf[r->pos - start] = '\0';
    *number = strtod(buf, &end);
    if (*end != '\0' || !isfinite(*number)) {
        r->pos = start;
        json_fail(r, "malformed number '%s'", buf);
        return 0;
    }
    return 1;
}

static int json_value(json_reader_t *r, chorus__json_t *v);

/* Append an empty item to v; NULL when out of memory. */
static chorus__json_t *json_push(json_reader_t *r, chorus__json_t *v, size_t *cap)
{
    if (v->n == *cap) {
        size_t more = *cap ? *cap * 2 : 8;
        chorus__json_t *items = realloc(v->items, more * sizeof(*items));

        if (items == NULL) {
            json_fail(r, "out of memory");
            return NULL;
        }
        v->items = items;
        *cap = more;
    }
    memset(&v->items[v->n], 0, sizeof(v->items[0]));
    return &v->items[v->n++];
}

/* An array or an object after its opening bracket. */
static int json_container(json_reader_t *r, chorus__json_t *v, int close)
{
    size_t cap = 0;

    if (++r->depth > CHORUS__JSON_DEPTH_MAX) {
        json_fail(r, "nested deeper than %d", CHORUS__JSON_DEPTH_MAX);
        return 0;
    }
    r->pos++;
    if (json_peek(r) == close) {
        r->pos++;
        r->depth--;
        return 1;
    }
    for (;;) {
        chorus__json_t *item = json_push(r, v, &cap);

        if (item == NULL)
            return 0;
        if (close == '}') {
            if (json_peek(r) != '"') {
                json_fail(r, "expected a member name");
                return 0;
            }
            if ((item->key = json_string(r)) == NULL)
                return 0;
            if (json_peek(r) != ':') {
                json_fail(r, "expected ':'");
                return 0;
            }
            r->pos++;
        }
        if (!json_value(r, item))
            return 0;
        int c = json_peek(r);

        r->pos++;
        if (c == close)
            break;
        if (c != ',') {
            r->pos--;
            json_fail(r, "expected ',' or '%c'", close);
            return 0;
        }
    }
    r->depth--;
    return 1;
}

static int json_value(json_reader_t *r, chorus__json_t *v)
{
    switch (json_peek(r)) {
    case '{':
        v->type = CHORUS__JSON_OBJECT;
        return json_container(r, v, '}');
    case '[':
        v->type = CHORUS__JSON_ARRAY;
        return json_container(r, v, ']');
    case '"':
        v->type = CHORUS__JSON_STRING;
        return (v->string = json_string(r)) != NULL;
    case 't':
        v->type = CHORUS__JSON_BOOL;
        v->boolean = 1;
        return json_literal(r, "true");
    case 'f':
        v->type = CHORUS__JSON_BOOL;
        return json_literal(r, "false");
    case 'n':
        v->type = CHORUS__JSON_NULL;
        return json_literal(r, "null");
    case -1:
        json_fail(r, "unexpected end of the text");
        return 0;
    default:
        v->type = CHORUS__JSON_NUMBER;
        return json_number(r, &v->number);
    }
}

static void json_free_inside(chorus__json_t *v)
{
    for (size_t i = 0; i < v->n; i++)
        json_free_inside(&v->items[i]);
    free(v->items);
    free(v->key);
    free(v->string);
}

void chorus__json_free(chorus__json_t *value)
{
    if (value == NULL)
        return;
    json_free_inside(value);
    free(value);
}

chorus_status_t chorus__json_parse(const char *text, size_t len, chorus__json_t **value_p,
                                   char *err, size_t errcap)
{
    json_reader_t r = {.text = text, .len = len, .err = err, .errcap = errcap};
    chorus__json_t *v = calloc(1, sizeof(*v));

    if (v == NULL)
        return CHORUS_ERR_NO_MEMORY;
    if (json_value(&r, v) && json_peek(&r) != -1)
        json_fail(&r, "text after the value");
    if (r.failed) {
        chorus__json_free(v);
        return CHORUS_ERR_INVALID_ARG;
    }
    *value_p = v;
    return CHORUS_OK;
}

const chorus__json_t *chorus__json_get(const chorus__json_t *value, const char *key)
{
    if (value == NULL || value->type != CHORUS__JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < value->n; i++) {
        if (strcmp(value->items[i].key, key) == 0)
            return &value->items[i];
    }
    return NULL;
}

double chorus__json_number(const chorus__json_t *value, const char *key, double fallback)
{
    const chorus__json_t *m = chorus__json_get(value, key);

    return m != NULL && m->type == CHORUS__JSON_NUMBER ? m->number : fallback;
}

const char *chorus__json_string(const chorus__json_t *value, const char *key)
{
    const chorus__json_t *m = chorus__json_get(value, key);

    return m != NULL && m->type == CHORUS__JSON_STRING ? m->string : NULL;
}

static void json_write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The shortest text that reads back as the same number. */
static void json_write_number(FILE *f, double x)
{
    char buf[40];

    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof(buf), "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, f);
}

void chorus__json_write(FILE *f, const chorus__json_t *value)
{
    switch (value->type) {
    case CHORUS__JSON_NULL:
        fputs("null", f);
        break;
    case CHORUS__JSON_BOOL:
        fputs(value->boolean ? "true" : "false", f);
        break;
    case CHORUS__JSON_NUMBER:
        json_write_number(f, value->number);
        break;
    case CHORUS__JSON_STRING:
        json_write_string(f, value->string);
        break;
    case CHORUS__JSON_ARRAY:
    case CHORUS__JSON_OBJECT:
        fputc(value->type == CHORUS__JSON_ARRAY ? '[' : '{', f);
        for (size_t i = 0; i < value->n; i++) {
            if (i > 0)
                fputc(',', f);
            if (value->type == CHORUS__JSON_OBJECT) {
                json_write_string(f, value->items[i].key);
                fputc(':', f);
            }
            chorus__json_write(f, &value->items[i]);
        }
        fputc(value->type == CHORUS__JSON_ARRAY ? ']' : '}', f);
        break;
    }
}
