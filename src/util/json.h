/*
 * A small JSON reader and writer: enough to read trace files back
 * (chorus-trace, the tests) and write merged ones. The whole text is parsed
 * into a tree; depth and errors are bounded and reported with the line and
 * column where the text went wrong.
 */
#ifndef CHORUS_UTIL_JSON_H
#define CHORUS_UTIL_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "chorus.h"

typedef enum {
    CHORUS__JSON_NULL = 0,
    CHORUS__JSON_BOOL,
    CHORUS__JSON_NUMBER,
    CHORUS__JSON_STRING,
    CHORUS__JSON_ARRAY,
    CHORUS__JSON_OBJECT,
} chorus__json_type_t;

typedef struct chorus__json chorus__json_t;

struct chorus__json {
    chorus__json_type_t type;
    char *key;                  /* the member's name inside an object, else NULL */
    int boolean;
    double number;
    char *string;               /* decoded, NUL-terminated (no NUL inside) */
    chorus__json_t *items;      /* an array's elements or an object's members, in order */
    size_t n;
};

/* Deepest nesting of arrays and objects accepted. */
#define CHORUS__JSON_DEPTH_MAX 64

/*
 * Parse len bytes of text (one value, with white space around it). On
 * failure returns CHORUS_ERR_INVALID_ARG and writes "line L, column C: what"
 * into err (errcap bytes).
 */
chorus_status_t chorus__json_parse(const char *text, size_t len, chorus__json_t **value_p,
                                   char *err, size_t errcap);
void chorus__json_free(chorus__json_t *value);

/* The member key of an object, or NULL (also when value is not an object). */
const chorus__json_t *chorus__json_get(const chorus__json_t *value, const char *key);
/* The number of member key, or fallback when missing or not a number. */
double chorus__json_number(const chorus__json_t *value, const char *key, double fallback);
/* The string of member key, or NULL when missing or not a string. */
const char *chorus__json_string(const chorus__json_t *value, const char *key);

/* value as JSON text (compact). */
void chorus__json_write(FILE *f, const chorus__json_t *value);

#endif
