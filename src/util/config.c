/* Configuration tables: parsing, reading from the environment, printing. */
#include "util/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/log.h"

chorus_status_t chorus__config_parse_double(const char *text, void *field)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v))
        return CHORUS_ERR_INVALID_ARG;
    *(double *)field = v;
    return CHORUS_OK;
}

chorus_status_t chorus__config_parse_int(const char *text, void *field)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < INT_MIN || v > INT_MAX)
        return CHORUS_ERR_INVALID_ARG;
    *(int *)field = (int)v;
    return CHORUS_OK;
}

chorus_status_t chorus__config_parse_size(const char *text, void *field)
{
    char *end;
    unsigned long long v, mult = 1;

    if (text[0] == '-')
        return CHORUS_ERR_INVALID_ARG;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || end == text)
        return CHORUS_ERR_INVALID_ARG;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': mult = 1ULL << 10; end++; break;
    case 'M': mult = 1ULL << 20; end++; break;
    case 'G': mult = 1ULL << 30; end++; break;
    default: return CHORUS_ERR_INVALID_ARG;
    }
    if ((*end == 'B' || *end == 'b') && mult != 1)
        end++;
    if (*end != '\0' || (v != 0 && mult > SIZE_MAX / v))
        return CHORUS_ERR_INVALID_ARG;
    *(size_t *)field = (size_t)(v * mult);
    return CHORUS_OK;
}

chorus_status_t chorus__config_parse_bool(const char *text, void *field)
{
    static const char *const yes[] = {"1", "y", "yes", "on", "true"};
    static const char *const no[] = {"0", "n", "no", "off", "false"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *(int *)field = 1;
            return CHORUS_OK;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *(int *)field = 0;
            return CHORUS_OK;
        }
    }
    return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__config_parse_string(const char *text, void *field)
{
    chorus__config_str_t *str = field;
    size_t len = strlen(text);

    if (len >= sizeof(str->s))
        return CHORUS_ERR_INVALID_ARG;
    memcpy(str->s, text, len + 1);
    return CHORUS_OK;
}

chorus_status_t chorus__config_read(const chorus__config_table_t *table, void *obj)
{
    for (size_t i = 0; i < table->count; i++) {
        const chorus__config_var_t *var = &table->vars[i];
        const char *text = getenv(var->name);
        void *field = (char *)obj + var->offset;

        if (text != NULL && *text != '\0') {
            if (var->parse(text, field) != CHORUS_OK) {
                chorus_error("invalid value '%s' for %s (%s)", text, var->name, var->help);
                return CHORUS_ERR_INVALID_ARG;
            }
            continue;
        }
        if (var->parse(var->default_value, field) != CHORUS_OK) {
            chorus_error("internal: default '%s' of %s does not parse",
                         var->default_value, var->name);
            return CHORUS_ERR_INTERNAL;
        }
    }
    return CHORUS_OK;
}

int chorus__config_given(const chorus__config_table_t *table, size_t offset)
{
    for (size_t i = 0; i < table->count; i++) {
        const char *text;

        if (table->vars[i].offset != offset)
            continue;
        text = getenv(table->vars[i].name);
        return text != NULL && *text != '\0';
    }
    return 0;
}

/* Escape text for roff: a leading dot or quote, and backslashes. */
static void print_roff(FILE *out, const char *text)
{
    if (*text == '.' || *text == '\'')
        fputs("\\&", out);
    for (; *text; text++) {
        if (*text == '\\')
            fputs("\\e", out);
        else if (*text == '-')
            fputs("\\-", out);
        else
            fputc(*text, out);
    }
}

void chorus__config_print(FILE *out, const chorus__config_table_t *const *tables, int as_man)
{
    for (size_t t = 0; tables[t] != NULL; t++) {
        const chorus__config_table_t *table = tables[t];

        /* The heading names the component once; descriptions do not repeat it. */
        if (as_man) {
            fputs(".SS ", out);
            print_roff(out, table->component);
            fputs(": ", out);
            print_roff(out, table->description);
            fputc('\n', out);
        } else {
            fprintf(out, "# %s: %s\n", table->component, table->description);
        }
        for (size_t i = 0; i < table->count; i++) {
            const chorus__config_var_t *var = &table->vars[i];
            const char *now = getenv(var->name);

            if (as_man) {
                fprintf(out, ".TP\n.B %s\n(default: ", var->name);
                print_roff(out, *var->default_value ? var->default_value : "empty");
                fputs(")\n", out);
                print_roff(out, var->help);
                fputc('\n', out);
            } else {
                fprintf(out, "%s=%s", var->name, now ? now : var->default_value);
                if (now)
                    fprintf(out, "    (set; default: %s)", var->default_value);
                fprintf(out, "\n    %s\n", var->help);
            }
        }
        if (!as_man)
            fputc('\n', out);
    }
}
