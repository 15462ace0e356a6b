/* harness/report/record.h — the JSON Lines records read back (report_json.c
 * writes them): a case record becomes the ac_result it was written from, as
 * far as the summary, the distinct failures and every report writer read it
 * (timings excepted: records carry none), so `attncheck merge` recomputes
 * exactly the summary and reports of the run that wrote them.  The
 * environment and campaign records keep their fields. */
#ifndef ATTNCHECK_RECORD_H
#define ATTNCHECK_RECORD_H

#include <stdbool.h>
#include <stddef.h>

#include "harness/report/report.h"
#include "harness/run/run.h"

typedef enum { AC_RECORD_CASE, AC_RECORD_ENVIRONMENT, AC_RECORD_CAMPAIGN, AC_RECORD_OTHER } ac_record_type;

typedef struct {
    ac_record_type type;
    char type_name[32]; /* the "type" key; "" for a case record */
    /* case records */
    char kernel[AC_KERNEL_NAME_LEN];
    ac_result res; /* res.index: the case index (has_index) */
    bool has_index;
    char minimal[AC_CASE_LINE_MAX];
    bool has_minimal;
    void *json; /* the parsed object (cJSON), for ac_record_text and _fields */
} ac_record;

/* Parses one line.  AC_ERR_INPUT naming the key when it is not a record this
 * attncheck writes (not JSON, not an object, a case record missing a key). */
int ac_record_parse(const char *text, ac_record *rec, ac_err *err);
void ac_record_free(ac_record *rec);
/* The value of key in the record as JSON text ("7", "\"cpu-flash\""), or NULL;
 * into buf.  Compares the environment records of shards. */
const char *ac_record_value(const ac_record *rec, const char *key, char *buf, size_t len);
/* The record's top-level fields that are strings, numbers or booleans (the
 * "type" key excepted), pointing into rec: valid until ac_record_free. */
size_t ac_record_fields(const ac_record *rec, ac_report_field *out, size_t max);

#endif
