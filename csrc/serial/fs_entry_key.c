/* fs_entry_key.c - a stored table entry's filter checked and keyed in one
 * pass over its bytes, out of line, for any dialect (fs_entry_key.h has
 * the pass, inline, and says what it proves).  Each dialect has its own
 * copies, for the literal table and for a shape's, the rules and want's
 * absence folded to constants (as the tokenizer's). */
#include "fs_entry_key.h"

static int literal_key_nats(const char *f, uint32_t len, size_t room, uint64_t *key)
{
    return fs_entry_key_in(FS_NATS, f, len, room, NULL, key);
}
static int literal_key_mqtt(const char *f, uint32_t len, size_t room, uint64_t *key)
{
    return fs_entry_key_in(FS_MQTT, f, len, room, NULL, key);
}
static int literal_key_amqp(const char *f, uint32_t len, size_t room, uint64_t *key)
{
    return fs_entry_key_in(FS_AMQP, f, len, room, NULL, key);
}
static int shaped_key_nats(const char *f, uint32_t len, size_t room, const fs_shape_of *want, uint64_t *key)
{
    return fs_entry_key_in(FS_NATS, f, len, room, want, key);
}
static int shaped_key_mqtt(const char *f, uint32_t len, size_t room, const fs_shape_of *want, uint64_t *key)
{
    return fs_entry_key_in(FS_MQTT, f, len, room, want, key);
}
static int shaped_key_amqp(const char *f, uint32_t len, size_t room, const fs_shape_of *want, uint64_t *key)
{
    return fs_entry_key_in(FS_AMQP, f, len, room, want, key);
}

int fs_entry_key(fs_dialect d, const char *f, uint32_t len, size_t room, const fs_shape_of *want, uint64_t *key)
{
    if (!want)
        return FS_PER_DIALECT(d, literal_key_nats(f, len, room, key), literal_key_mqtt(f, len, room, key),
                              literal_key_amqp(f, len, room, key));
    return FS_PER_DIALECT(d, shaped_key_nats(f, len, room, want, key), shaped_key_mqtt(f, len, room, want, key),
                          shaped_key_amqp(f, len, room, want, key));
}
