/*
 * resp_commands.h -- the RESP protocol module for net.c (proto.h): every
 * command of SPEC section 7 over the service layer.  main.c hands
 * &sl_resp_proto to sl_net_start.
 */
#ifndef SL_RESP_COMMANDS_H
#define SL_RESP_COMMANDS_H

#include "proto.h"

extern const sl_proto sl_resp_proto;

#endif
