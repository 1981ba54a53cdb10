/*
 * test_rules_meta.c -- a descriptor's `metadata:` as the loader keeps it
 * (src/rules/rules_meta.h): every kind a YAML value becomes, as
 * envoyproxy/ratelimit's yaml.v2 + structpb read it; the keys' strings;
 * and the refusals -- bad keys, duplicates, the bounds -- with their exact
 * messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rules.h"
#include "rules_meta.h"

static char err[1024];

static sl_rules *load(const char *yaml)
{
    sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, strlen(yaml), err, sizeof err);
    if (r == NULL) fail_msg("load failed: %s", err);
    return r;
}

/* Loading yaml fails with exactly msg. */
static void refused(const char *yaml, const char *msg)
{
    sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, strlen(yaml), err, sizeof err);
    if (r != NULL) {
        sl_rules_free(r);
        fail_msg("loaded, expected \"%s\"", msg);
    }
    assert_string_equal(err, msg);
}

/* The metadata of the i-th top-level descriptor of the first domain. */
static const sl_rule_meta *meta_of(const sl_rules *r, int i)
{
    const sl_rule_domain *d = sl_rules_domain(r, 0);
    assert_non_null(d);
    assert_true(i < d->root.nchildren);
    return d->root.children[i].metadata;
}

static const sl_rule_meta *get(const sl_rule_meta *m, const char *key)
{
    const sl_rule_meta *v = sl_rule_meta_get(m, key, strlen(key));
    if (v == NULL) fail_msg("no key '%s'", key);
    return v;
}

static void is_null(const sl_rule_meta *m, const char *key)
{
    assert_int_equal(get(m, key)->kind, SL_META_NULL);
}

static void is_bool(const sl_rule_meta *m, const char *key, int b)
{
    const sl_rule_meta *v = get(m, key);
    if (v->kind != SL_META_BOOL) fail_msg("'%s' is kind %d, not a bool", key, v->kind);
    assert_int_equal(v->boolean, b);
}

static void is_number(const sl_rule_meta *m, const char *key, double x)
{
    const sl_rule_meta *v = get(m, key);
    if (v->kind != SL_META_NUMBER) fail_msg("'%s' is kind %d, not a number", key, v->kind);
    if (isnan(x)) {
        assert_true(isnan(v->number));
        return;
    }
    if (v->number != x) fail_msg("'%s' is %.17g, not %.17g", key, v->number, x);
}

static void is_string(const sl_rule_meta *m, const char *key, const char *s)
{
    const sl_rule_meta *v = get(m, key);
    if (v->kind != SL_META_STRING) fail_msg("'%s' is kind %d, not a string", key, v->kind);
    assert_int_equal(v->n, strlen(s));
    assert_memory_equal(v->str, s, v->n);
}

#define HEAD "domain: d\ndescriptors:\n  - key: k\n    metadata:\n"

/* yaml.v2's scalars: null, its bool words (three cases each, y and n
 * too), its ints and floats, and everything else a string. */
static void scalar_kinds(void **state)
{
    (void)state;
    sl_rules *r = load(HEAD "      n1: ~\n"
                            "      n2: null\n"
                            "      n3:\n"
                            "      n4: NULL\n"
                            "      b1: yes\n"
                            "      b2: Off\n"
                            "      b3: y\n"
                            "      b4: N\n"
                            "      b5: TRUE\n"
                            "      b6: on\n"
                            "      s1: tRUE\n"
                            "      s2: \"yes\"\n"
                            "      s3: 2001-12-14\n"
                            "      s4: |\n"
                            "        block 1\n"
                            "      s5: 1e400\n"
                            "      s6: 0x\n"
                            "      s7: 12:30\n"
                            "      s8: '42'\n"
                            "      s9: \"a\\0b\"\n"
                            "      i1: 42\n"
                            "      i2: -0x1F\n"
                            "      i3: 0777\n"
                            "      i4: 0b101\n"
                            "      i5: 1_000\n"
                            "      i6: 18446744073709551615\n"
                            "      i7: +12\n"
                            "      i8: 0o17\n"
                            "      f1: 1.5\n"
                            "      f2: .5\n"
                            "      f3: -1e3\n"
                            "      f4: .inf\n"
                            "      f5: -.Inf\n"
                            "      f6: .NaN\n"
                            "      f7: 08\n"
                            "      f8: 6.02e+23\n");
    const sl_rule_meta *m = meta_of(r, 0);
    assert_non_null(m);
    assert_int_equal(m->kind, SL_META_MAP);
    assert_int_equal(m->n, 35);
    is_null(m, "n1");
    is_null(m, "n2");
    is_null(m, "n3");
    is_null(m, "n4");
    is_bool(m, "b1", 1);
    is_bool(m, "b2", 0);
    is_bool(m, "b3", 1);
    is_bool(m, "b4", 0);
    is_bool(m, "b5", 1);
    is_bool(m, "b6", 1);
    is_string(m, "s1", "tRUE");
    is_string(m, "s2", "yes");
    is_string(m, "s3", "2001-12-14");
    is_string(m, "s4", "block 1\n");
    is_string(m, "s5", "1e400");
    is_string(m, "s6", "0x");
    is_string(m, "s7", "12:30");
    is_string(m, "s8", "42");
    const sl_rule_meta *s9 = get(m, "s9");
    assert_int_equal(s9->kind, SL_META_STRING);
    assert_int_equal(s9->n, 3);
    assert_memory_equal(s9->str, "a\0b", 3);
    is_number(m, "i1", 42);
    is_number(m, "i2", -31);
    is_number(m, "i3", 511);
    is_number(m, "i4", 5);
    is_number(m, "i5", 1000);
    is_number(m, "i6", 18446744073709551615.0);
    is_number(m, "i7", 12);
    is_number(m, "i8", 15);
    is_number(m, "f1", 1.5);
    is_number(m, "f2", 0.5);
    is_number(m, "f3", -1000);
    is_number(m, "f4", INFINITY);
    is_number(m, "f5", -INFINITY);
    is_number(m, "f6", NAN);
    is_number(m, "f7", 8);
    is_number(m, "f8", 6.02e23);
    /* sorted by key */
    for (size_t i = 1; i < m->n; i++)
        assert_true(strcmp(m->entries[i - 1].key, m->entries[i].key) < 0);
    sl_rules_free(r);
}

/* Maps and lists, nested; keys at the top as written, deeper down Go's
 * "%v" of their value. */
static void maps_lists_keys(void **state)
{
    (void)state;
    sl_rules *r =
        load(HEAD "      yes: top-yes\n"
                  "      1.0: top-one\n"
                  "      ~: top-null\n"
                  "      l: [1, a, [true], {x: 1}, []]\n"
                  "      m: {1.0: a, yes: b, ~: c, 0x10: d, 1e6: e, 123456: f, 0.0001: g,\n"
                  "          1e-05: h, \"q\": i, -0.0: j, 1.5e300: k, 1234567.0: l,\n"
                  "          18446744073709551615: m, .nan: nn, -.inf: o, 0.1: p}\n"
                  "      e: {}\n");
    const sl_rule_meta *m = meta_of(r, 0);
    is_string(m, "yes", "top-yes");
    is_string(m, "1.0", "top-one");
    is_string(m, "", "top-null");
    const sl_rule_meta *l = get(m, "l");
    assert_int_equal(l->kind, SL_META_LIST);
    assert_int_equal(l->n, 5);
    assert_int_equal(l->items[0].kind, SL_META_NUMBER);
    assert_true(l->items[0].number == 1);
    assert_int_equal(l->items[1].kind, SL_META_STRING);
    assert_string_equal(l->items[1].str, "a");
    assert_int_equal(l->items[2].kind, SL_META_LIST);
    assert_int_equal(l->items[2].n, 1);
    assert_int_equal(l->items[2].items[0].kind, SL_META_BOOL);
    assert_int_equal(l->items[3].kind, SL_META_MAP);
    is_number(&l->items[3], "x", 1);
    assert_int_equal(l->items[4].kind, SL_META_LIST);
    assert_int_equal(l->items[4].n, 0);
    const sl_rule_meta *k = get(m, "m");
    assert_int_equal(k->kind, SL_META_MAP);
    assert_int_equal(k->n, 16);
    is_string(k, "1", "a");
    is_string(k, "true", "b");
    is_string(k, "<nil>", "c");
    is_string(k, "16", "d");
    is_string(k, "1e+06", "e");
    is_string(k, "123456", "f");
    is_string(k, "0.0001", "g");
    is_string(k, "1e-05", "h");
    is_string(k, "q", "i");
    is_string(k, "-0", "j");
    is_string(k, "1.5e+300", "k");
    is_string(k, "1.234567e+06", "l"); /* a float; the int 1234567 would be "1234567" */
    is_string(k, "18446744073709551615", "m");
    is_string(k, "NaN", "nn"); /* a value n would be false */
    is_string(k, "-Inf", "o");
    is_string(k, "0.1", "p");
    const sl_rule_meta *e = get(m, "e");
    assert_int_equal(e->kind, SL_META_MAP);
    assert_int_equal(e->n, 0);
    sl_rules_free(r);
}

/* An empty or null metadata is none (the peer's parseMetadata); RL.RULES
 * still notes one that was written. */
static void empty_is_none(void **state)
{
    (void)state;
    sl_rules *r = load("domain: d\ndescriptors:\n"
                       "  - {key: a, metadata: {}}\n"
                       "  - {key: b, metadata: ~}\n"
                       "  - {key: c}\n"
                       "  - {key: e, metadata: {x: 1}}\n");
    const sl_rule_domain *d = sl_rules_domain(r, 0);
    assert_null(d->root.children[0].metadata);
    assert_true(d->root.children[0].has_metadata);
    assert_null(d->root.children[1].metadata);
    assert_false(d->root.children[1].has_metadata);
    assert_null(d->root.children[2].metadata);
    assert_non_null(d->root.children[3].metadata);
    is_number(d->root.children[3].metadata, "x", 1);
    sl_rules_free(r);
}

/* Aliases are copied where they are used. */
static void aliases(void **state)
{
    (void)state;
    sl_rules *r = load("domain: d\ndescriptors:\n"
                       "  - key: a\n    metadata: {base: &b {x: 1, z: [2], y: 3}}\n"
                       "  - key: b\n    metadata: {copy: *b}\n");
    const sl_rule_meta *c = get(meta_of(r, 1), "copy");
    is_number(c, "x", 1);
    assert_int_equal(get(c, "z")->kind, SL_META_LIST);
    is_number(c, "true", 3); /* deeper down, the key y is yaml.v2's true */
    sl_rules_free(r);
}

static void bad_keys(void **state)
{
    (void)state;
    refused(HEAD "      a: 1\n      b: 2\n      a: 3\n",
            "t.yaml:7:7: duplicate key 'a' in metadata (first at line 5, column 7)");
    /* deeper down 1 and "1" are one key, "1" */
    refused(HEAD "      m: {1: a, \"1\": b}\n",
            "t.yaml:5:17: duplicate key '1' in metadata (first at line 5, column 11)");
    /* at the top they are two: "1" as written twice is one */
    refused(HEAD "      1: a\n      \"1\": b\n",
            "t.yaml:6:7: duplicate key '1' in metadata (first at line 5, column 7)");
    /* yes and true deeper down are both "true" */
    refused(HEAD "      m: {z: 0, yes: a, true: b}\n",
            "t.yaml:5:25: duplicate key 'true' in metadata (first at line 5, column 17)");
    refused(HEAD "      {[a]: 1}\n",
            "t.yaml:5:8: metadata keys must be strings, numbers or booleans, not a list");
    refused(HEAD "      m: {{a: 1}: 1}\n",
            "t.yaml:5:11: metadata keys must be strings, numbers or booleans, not a map");
    refused(HEAD "      <<: {a: 1}\n",
            "t.yaml:5:7: YAML merge keys (<<) are not supported in metadata");
    refused("domain: d\ndescriptors:\n  - {key: k, metadata: [1]}\n",
            "t.yaml:3:24: metadata must be a map (name: value ...), not a list");
}

/* SL_RULES_META_MAX_DEPTH: the metadata map is level 1. */
static void depth_bound(void **state)
{
    (void)state;
    char y[512];
    /* 15 lists in the map: the innermost at level 16, accepted */
    snprintf(y, sizeof y, HEAD "      a: %.15s1%.15s\n", "[[[[[[[[[[[[[[[[[[[[",
             "]]]]]]]]]]]]]]]]]]]]");
    sl_rules *r = load(y);
    const sl_rule_meta *v = get(meta_of(r, 0), "a");
    for (int i = 0; i < 15; i++) {
        assert_int_equal(v->kind, SL_META_LIST);
        v = &v->items[0];
    }
    assert_int_equal(v->kind, SL_META_NUMBER);
    sl_rules_free(r);
    /* 16: the 16th list (column 10 + 15) is level 17 */
    snprintf(y, sizeof y, HEAD "      a: %.16s1%.16s\n", "[[[[[[[[[[[[[[[[[[[[",
             "]]]]]]]]]]]]]]]]]]]]");
    refused(y, "t.yaml:5:25: metadata nested deeper than 16 levels (SL_RULES_META_MAX_DEPTH)");
}

/* SL_RULES_META_MAX_VALUES, over the whole set. */
static void values_bound(void **state)
{
    (void)state;
    /* two descriptors of 32766 list items each: 2 x (map + list + items)
     * = 65536 values, accepted; one item more is refused where it is */
    size_t cap = 2 * 32768 * 2 + 512;
    char *y = malloc(cap);
    assert_non_null(y);
    for (int more = 0; more < 2; more++) {
        size_t n = (size_t)snprintf(y, cap, "domain: d\ndescriptors:\n");
        for (int d = 0; d < 2; d++) {
            n += (size_t)snprintf(y + n, cap - n, "  - key: k%d\n    metadata: {a: [0", d);
            int items = 32766 + (d == 1 ? more : 0);
            for (int i = 1; i < items; i++) y[n++] = ',', y[n++] = '0';
            n += (size_t)snprintf(y + n, cap - n, "]}\n");
        }
        if (!more) {
            sl_rules *r = load(y);
            assert_int_equal(get(meta_of(r, 1), "a")->n, 32766);
            sl_rules_free(r);
        } else {
            /* line 6; the last item's column: "    metadata: {a: [" is 19
             * wide, item i at 20 + 2i, the 32767th (i = 32766) */
            char want[160];
            snprintf(want, sizeof want,
                     "t.yaml:6:%d: more than 65536 metadata values in the rules "
                     "(SL_RULES_META_MAX_VALUES)",
                     20 + 2 * 32766);
            refused(y, want);
        }
    }
    free(y);
}

/* SL_RULES_META_MAX_BYTES: keys and strings, each use of an alias again
 * (the message names the anchored value: an alias is its node). */
static void bytes_bound(void **state)
{
    (void)state;
    size_t cap = 70000 + 4096;
    char *y = malloc(cap);
    assert_non_null(y);
    char *s = malloc(60001);
    assert_non_null(s);
    memset(s, 'x', 60000);
    s[60000] = '\0';
    for (int uses = 17; uses <= 18; uses++) {
        /* key "a" (1 byte) + uses x 60000 bytes: 17 fit in 1 MiB, 18 do not */
        size_t n = (size_t)snprintf(y, cap, HEAD "      a: [&s %s", s);
        for (int i = 1; i < uses; i++) n += (size_t)snprintf(y + n, cap - n, ", *s");
        snprintf(y + n, cap - n, "]\n");
        if (uses == 17) {
            sl_rules *r = load(y);
            assert_int_equal(get(meta_of(r, 0), "a")->n, 17);
            sl_rules_free(r);
        } else {
            refused(y, "t.yaml:5:11: more than 1048576 bytes of metadata keys and strings in "
                       "the rules (SL_RULES_META_MAX_BYTES)");
        }
    }
    free(s);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scalar_kinds),  cmocka_unit_test(maps_lists_keys),
        cmocka_unit_test(empty_is_none), cmocka_unit_test(aliases),
        cmocka_unit_test(bad_keys),      cmocka_unit_test(depth_bound),
        cmocka_unit_test(values_bound),  cmocka_unit_test(bytes_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
