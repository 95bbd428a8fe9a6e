/*
 * Configuration tables. Each component declares one table of variables
 * (name, default as text, help, parser, offset of the field it fills) and
 * reads it once into its own struct. chorus-info -c and chorus(7) are
 * generated from the same tables (the list is the core's: chorus__config_tables).
 */
#ifndef CHORUS_UTIL_CONFIG_H
#define CHORUS_UTIL_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include "chorus.h"

#define CHORUS_CONFIG_STR_MAX 256

typedef struct {
    char s[CHORUS_CONFIG_STR_MAX];
} chorus__config_str_t;

/* A parser reads text into the field; returns CHORUS_ERR_INVALID_ARG on bad text. */
typedef chorus_status_t (*chorus__config_parse_fn)(const char *text, void *field);

typedef struct {
    const char *name;           /* "CHORUS_TIMEOUT" */
    const char *default_value;  /* as text, parsed like a user's value */
    const char *help;           /* one sentence or more */
    chorus__config_parse_fn parse;
    size_t offset;              /* of the field in the component's struct */
} chorus__config_var_t;

typedef struct chorus__config_table {
    const char *component;      /* "core", "tcp", ... */
    const char *description;    /* what the variables are about; headings add the component */
    const chorus__config_var_t *vars;
    size_t count;
} chorus__config_table_t;

/* Parsers. */
chorus_status_t chorus__config_parse_double(const char *text, void *field); /* double */
chorus_status_t chorus__config_parse_int(const char *text, void *field);    /* int */
chorus_status_t chorus__config_parse_size(const char *text, void *field);   /* size_t, K/M/G suffixes */
chorus_status_t chorus__config_parse_bool(const char *text, void *field);   /* int: 1/0, yes/no, on/off, true/false */
chorus_status_t chorus__config_parse_string(const char *text, void *field); /* chorus__config_str_t */

/*
 * Fill obj from the environment, defaults where a variable is unset. A value
 * that does not parse is logged with the variable's name and value and
 * returns CHORUS_ERR_INVALID_ARG.
 */
chorus_status_t chorus__config_read(const chorus__config_table_t *table, void *obj);

/*
 * 1 when the environment sets the variable of table that fills the field at
 * offset (a value the user chose, not the default), else 0.
 */
int chorus__config_given(const chorus__config_table_t *table, size_t offset);

/* Print every variable of tables (NULL-terminated) with its default and help: as text, or as man(7) source. */
void chorus__config_print(FILE *out, const chorus__config_table_t *const *tables, int as_man);

#endif
