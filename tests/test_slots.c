/*
 * test_slots.c -- Redis Cluster's key slots (src/backend/redis/slots.h):
 * the CRC16 against its published check value, the slot of keys with and
 * without hash tags against the values Redis's own CLUSTER KEYSLOT gave
 * for them (redis-server 7.0 started with --cluster-enabled yes, asked
 * `redis-cli CLUSTER KEYSLOT <key>` for each key of the table), and the
 * slot map.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "redis/slots.h"

static void test_crc16_check_value(void **state)
{
    (void)state;
    assert_int_equal(sl_crc16("123456789", 9), 0x31c3); /* CRC-16/XMODEM's check */
    assert_int_equal(sl_crc16("", 0), 0);
}

/* Keys and the slots CLUSTER KEYSLOT answered for them. */
static const struct {
    const char *key;
    size_t len;
    int slot;
} known[] = {
    {"foo", 3, 12182},
    {"user1000", 8, 3443},
    {"{user1000}.following", 20, 3443}, /* the tag alone is hashed */
    {"foo{}{bar}", 10, 8363},           /* "{}": empty, so the whole key */
    {"foo{{bar}}zap", 13, 4015},        /* the tag is "{bar" */
    {"foo{bar}{zap}", 13, 5061},        /* the first tag: "bar" */
    {"sl:01:{api}|spare", 17, 6541},    /* a backend key: the domain's slot */
    {"sl:40:{api}", 11, 6541},
};

static void test_key_slots(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        assert_int_equal(strlen(known[i].key), known[i].len);
        if (sl_key_slot(known[i].key, known[i].len) != known[i].slot)
            fail_msg("%s: slot %d, Redis says %d", known[i].key,
                     sl_key_slot(known[i].key, known[i].len), known[i].slot);
    }
    assert_int_equal(sl_key_slot("bar", 3), sl_key_slot("x{bar}y", 7));
    assert_int_equal(sl_key_slot("{", 1), sl_crc16("{", 1) & 16383); /* no '}': the whole key */
    assert_int_equal(sl_key_slot("a\0{b}", 5), sl_key_slot("b", 1)); /* binary keys */
}

static void test_slotmap(void **state)
{
    (void)state;
    static sl_slotmap m;
    sl_slotmap_clear(&m);
    assert_int_equal(sl_slotmap_uncovered(&m), SL_SLOTS);
    assert_int_equal(sl_slotmap_set(&m, 0, 5460, 0), 0);
    assert_int_equal(sl_slotmap_set(&m, 5461, 10922, 1), 0);
    assert_int_equal(sl_slotmap_uncovered(&m), SL_SLOTS - 10923);
    assert_int_equal(sl_slotmap_set(&m, 10923, 16383, 2), 0);
    assert_int_equal(sl_slotmap_uncovered(&m), 0);
    assert_int_equal(m.node[0], 0);
    assert_int_equal(m.node[5461], 1);
    assert_int_equal(m.node[16383], 2);
    assert_int_equal(sl_slotmap_set(&m, 7, 7, 2), 0); /* MOVED: one slot */
    assert_int_equal(m.node[7], 2);
    assert_int_equal(m.node[8], 0);
    assert_int_equal(sl_slotmap_set(&m, -1, 3, 0), -1);
    assert_int_equal(sl_slotmap_set(&m, 3, SL_SLOTS, 0), -1);
    assert_int_equal(sl_slotmap_set(&m, 9, 8, 0), -1);
    assert_int_equal(sl_slotmap_set(&m, 1, 1, -1), -1);
    assert_int_equal(m.node[1], 0); /* nothing set by a refusal */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_check_value),
        cmocka_unit_test(test_key_slots),
        cmocka_unit_test(test_slotmap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
