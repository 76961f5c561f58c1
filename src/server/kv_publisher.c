/* kv_publisher.c - see kv_publisher.h. */
#include "server/kv_publisher.h"

#include <stdlib.h>

ds_status ds_kv_publisher_start(ds_kv_event_queue *q, const ds_kv_publisher_params *p, ds_kv_publisher **out,
                                ds_err *e) {
    (void)q;
    *out = NULL;
    return ds_fail(e, DS_EUNSUPPORTED, "KV events: %s: not built yet", p->endpoint);
}

void ds_kv_publisher_stop(ds_kv_publisher *pub) { (void)pub; }

void ds_kv_publisher_stats_get(ds_kv_publisher *pub, ds_kv_publisher_stats *s) {
    (void)pub;
    *s = (ds_kv_publisher_stats){0};
}
