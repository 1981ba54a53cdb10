/*
 * rls_meta.h -- RateLimitResponse's dynamic_metadata as envoyproxy/ratelimit
 * writes it (its RESPONSE_DYNAMIC_METADATA, sluiced's
 * --response-dynamic-metadata): a google.protobuf.Struct built from the
 * request and the rules' `metadata:` (src/rules/rules_meta.h), packed in
 * protobuf's wire format for rls_wire.h's sl_rls_resp_pack.
 *
 * The Struct, field for field the peer's (ratelimitToMetadata):
 *
 *   "domain"       the request's domain (a string)
 *   "descriptors"  a list, one struct per request descriptor, in order:
 *       "entries"     a list of strings "key=value", in order
 *       "limit"       when the descriptor carries a limit override: the
 *                     override in protobuf's text format, zero fields left
 *                     out: "requests_per_unit:10 unit:MINUTE" (an unknown
 *                     unit number as its number).  The peer writes Go's
 *                     prototext String(), whose spacing is deliberately
 *                     unstable (one or two spaces between fields, chosen at
 *                     random per process); sluiced always writes one.
 *       "hitsAddend"  when the descriptor's hits_addend is set (0 too):
 *                     its value, a number
 *   "hitsAddend"   when the request's hits_addend is not 0: a number
 *   "metadata"     when some passed descriptor's rule has metadata: the
 *                  merge of those, in descriptor order, as the peer's
 *                  mergeMetadata does -- the first value of a key wins,
 *                  except that two maps under one key are merged the same
 *                  way, recursively.  (The peer merges into the first
 *                  rule's own map, so its later answers can show keys
 *                  merged in by earlier requests; sluiced's rules are
 *                  immutable and each answer is the merge of its own.)
 *
 * Which descriptors passed is the caller's decision (the peer: not
 * OVER_LIMIT, not unlimited, with a limit).
 *
 * Map fields are written in key order (bytes, as memcmp, a prefix first)
 * at every level: protobuf allows any order, and one order makes the
 * answer's bytes the same for the same input.  Each map entry carries its
 * key and value fields, an empty key included.
 */
#ifndef SL_RLS_META_H
#define SL_RLS_META_H

#include "buf.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "rules_meta.h"

/* Appends to out the Struct above, packed (its fields; no tag or length
 * of its own: rls_wire.h's dmeta), for request req whose passed
 * descriptors' rules have the metadata passed[0..npassed) -- in descriptor
 * order, NULL entries (no metadata) skipped; each a MAP.
 *
 * Returns 0, or SL_ENOMEM with out unchanged.  O(size of the answer x
 * metadata depth), plus a merge step per key over the passed maps that
 * hold it; allocates out's growth and, when two or more passed maps are
 * merged, one scratch array. */
int sl_rls_dmeta(const Envoy__Service__Ratelimit__V3__RateLimitRequest *req,
                 const struct sl_rule_meta *const *passed, int npassed, sl_buf *out);

#endif
