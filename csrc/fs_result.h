/* fs_result.h - what one subject matched, as both the index and the
 * result cache hold it.  Below both: it depends on neither. */
#ifndef FS_RESULT_H
#define FS_RESULT_H

#include <stddef.h>
#include <stdint.h>

/* A group in a match result.  Byte ranges index fs_result.arena; members
 * index fs_result.ids. */
typedef struct {
    size_t name_off, name_len;
    size_t filter_off, filter_len;   /* MQTT: the group's filter; NATS: 0, 0 */
    size_t members_off, members_len;
    uint32_t key_hash;               /* identifies the group for queue picks */
} fs_group_out;

/* What one subject matched: ids[0..nplain) are the plain subscriptions,
 * then each group's members. */
typedef struct {
    int64_t *ids;
    size_t nids, cap_ids, nplain;
    fs_group_out *groups;
    size_t ngroups, cap_groups;
    char *arena;
    size_t narena, cap_arena;
} fs_result;

void fs_result_init(fs_result *r);
void fs_result_free(fs_result *r);

#endif
