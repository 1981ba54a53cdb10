/*
 * resp_commands.h -- the RESP protocol module for net.c (proto.h): every
 * command of SPEC section 7 over the service layer.  main.c hands
 * &sl_resp_proto to sl_net_start.
 */
#ifndef SL_RESP_COMMANDS_H
#define SL_RESP_COMMANDS_H

#include "auth.h"
#include "proto.h"

/* Bytes of a connection's name (CLIENT SETNAME, HELLO ... SETNAME) and of
 * each of its CLIENT SETINFO attributes (lib-name, lib-ver).  Redis sets no
 * bound; sluiced keeps them per connection, so it does. */
#define SL_RESP_MAX_NAME 256

/* Commands one transaction may queue between MULTI and EXEC (their bytes
 * together: at most max-command).  Redis sets no bound; sluiced keeps the
 * queue per connection and EXEC runs it in one go, without the turns that
 * share a worker between its clients, so at most one turn's worth of
 * commands (net.h's SL_NET_TURN_CMDS). */
#define SL_RESP_MAX_QUEUED 1024

extern const sl_proto sl_resp_proto;

/* What the RESP module knows of connection c, for tests: the user it
 * logged in as by AUTH or HELLO (NULL: none yet), and the protocol its
 * replies are in (SL_RESP2 or SL_RESP3). */
const sl_auth_user *sl_resp_conn_user(const sl_conn *c);
int sl_resp_conn_proto(const sl_conn *c);

#endif
