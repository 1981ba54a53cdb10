/*
 * test_module_plan.c -- the parsing of the module's RL.CHECKPLAN and
 * RL.HOLDCHECK (src/module/module.c, cp_parse and cp_distinct): the
 * concurrency leases RL.HOLDCHECK takes after the plan (nl, then hh hl
 * take shadow max ttl a lease), each refusal with its exact message, and
 * RL.CHECKPLAN's grammar unchanged (no lease section).  module.c is
 * included whole, its statics reached from here; of Redis's API only
 * StringPtrLen is faked (the parser reads nothing else without AT).
 * tests/e2e/test_holds_redis.py runs the command in a real Redis.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../src/module/module.c"

struct RedisModuleString {
    const char *p;
    size_t n;
};

static const char *fake_ptr_len(const RedisModuleString *s, size_t *len)
{
    *len = s->n;
    return s->p;
}

#define MAXARGS 64
static RedisModuleString strs[MAXARGS];
static RedisModuleString *argv[MAXARGS];
static cp_plan plan;
static char err[ERRLEN];

/* Parses the words (NULL-ended) as a command: cp_parse's answer, then
 * cp_distinct's when it parsed. */
static int parse(int holds, const char *const *words)
{
    int argc = 0;
    for (; words[argc] != NULL; argc++) {
        assert_true(argc < MAXARGS);
        strs[argc] = (RedisModuleString){words[argc], strlen(words[argc])};
        argv[argc] = &strs[argc];
    }
    err[0] = '\0';
    int rc = cp_parse(NULL, argv, argc, holds, &plan, err);
    return rc == 0 ? cp_distinct(argv, &plan, err) : rc;
}

/* One counter (fixed-window, L 10, W 60000, cost 1, enforced) on key k. */
#define COUNTER(k) k, "0", "10", "60000", "0", "0", "0", "1", "0", "0", "0", "0", "0"
#define HEAD1      "1", "0", "0", "0", "0" /* m 1, no pool, denied_never 0, qall 0, zmask 0 */

static void test_leases_parsed(void **state)
{
    (void)state;
    const char *w[] = {"RL.HOLDCHECK", HEAD1, COUNTER("sl:m1:{llm}|user=u#60000"), "2",
                       "sl:hh:{llm|user=u|conc}", "sl:hl:{llm|user=u|conc}", "1", "0", "2",
                       "10000", "sl:hh:{llm|batch=s|conc}", "sl:hl:{llm|batch=s|conc}", "0",
                       "1", "100000", "86400000", NULL};
    assert_int_equal(parse(1, w), 0);
    assert_int_equal(plan.m, 1);
    assert_int_equal(plan.nl, 2);
    assert_string_equal(plan.ls[0].hh->p, "sl:hh:{llm|user=u|conc}");
    assert_string_equal(plan.ls[0].hl->p, "sl:hl:{llm|user=u|conc}");
    assert_int_equal(plan.ls[0].take, 1);
    assert_int_equal(plan.ls[0].shadow, 0);
    assert_int_equal(plan.ls[0].max, 2);
    assert_int_equal(plan.ls[0].ttl, 10000);
    assert_string_equal(plan.ls[1].hh->p, "sl:hh:{llm|batch=s|conc}");
    assert_int_equal(plan.ls[1].take, 0);
    assert_int_equal(plan.ls[1].shadow, 1);
    assert_int_equal(plan.ls[1].max, SL_MAX_CONCURRENCY);
    assert_int_equal(plan.ls[1].ttl, SL_MAX_LEASE_TTL_MS);
    assert_int_equal(plan.ls[0].id, 0);
    assert_int_equal(plan.ls[0].seed, 0);
    /* a plan of leases only (no counter), and of no lease at all */
    const char *only[] = {"RL.HOLDCHECK", "0", "0", "0", "0", "0", "1", "a", "b", "1", "0", "1",
                          "1", NULL};
    assert_int_equal(parse(1, only), 0);
    assert_int_equal(plan.m, 0);
    assert_int_equal(plan.nl, 1);
    const char *none[] = {"RL.HOLDCHECK", HEAD1, COUNTER("k"), "0", NULL};
    assert_int_equal(parse(1, none), 0);
    assert_int_equal(plan.nl, 0);
}

static void test_leases_refused(void **state)
{
    (void)state;
    static const struct {
        const char *words[40];
        const char *msg;
    } bad[] = {
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), NULL},
         "13 arguments after the header for 1 counters and nl"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "17", NULL}, "nl is not an integer 0..16"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "x", NULL}, "nl is not an integer 0..16"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "1", "h", "l", "1", "0", "2", NULL},
         "5 arguments after nl for 1 leases (6 each)"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "1", "h", "l", "1", "0", "2", "9", "x", NULL},
         "7 arguments after nl for 1 leases (6 each)"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "1", "h", "l", "2", "0", "2", "9", NULL},
         "lease 1: take is not an integer 0..1"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "1", "h", "l", "1", "-1", "2", "9", NULL},
         "lease 1: shadow is not an integer 0..1"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "1", "h", "l", "1", "0", "0", "9", NULL},
         "lease 1: max is not an integer 1..100000"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "1", "h", "l", "1", "0", "100001", "9", NULL},
         "lease 1: max is not an integer 1..100000"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "2", "h", "l", "1", "0", "1", "9", "h2", "l2",
          "1", "0", "1", "86400001", NULL},
         "lease 2: ttl is not an integer 1..86400000"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "1", "k", "l", "1", "0", "1", "9", NULL},
         "lease 1: its hh key is named twice in the command"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "1", "h", "h", "1", "0", "1", "9", NULL},
         "lease 1: its hl key is named twice in the command"},
        {{"RL.HOLDCHECK", HEAD1, COUNTER("k"), "2", "h", "l", "1", "0", "1", "9", "h2", "h",
          "1", "0", "1", "9", NULL},
         "lease 2: its hl key is named twice in the command"},
        /* RL.CHECKPLAN takes no lease section: its grammar as before */
        {{"RL.CHECKPLAN", HEAD1, COUNTER("k"), "0", NULL},
         "14 arguments after the header for 1 counters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (parse(strcmp(bad[i].words[0], "RL.HOLDCHECK") == 0, bad[i].words) != -1)
            fail_msg("case %zu parsed", i);
        if (strcmp(err, bad[i].msg) != 0)
            fail_msg("case %zu: '%s', want '%s'", i, err, bad[i].msg);
    }
    /* RL.CHECKPLAN without leases still parses, nl 0 */
    const char *ok[] = {"RL.CHECKPLAN", HEAD1, COUNTER("k"), NULL};
    assert_int_equal(parse(0, ok), 0);
    assert_int_equal(plan.nl, 0);
}

int main(void)
{
    RedisModule_StringPtrLen = fake_ptr_len;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leases_parsed),
        cmocka_unit_test(test_leases_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
