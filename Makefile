# fence/Makefile

MODULE_big = fence
OBJS = \
	$(WIN32RES) \
	audit.o \
	claims.o \
	ddl.o \
	fence.o \
	guard.o \
	intact.o \
	protect.o \
	prune.o \
	report.o \
	stats.o \
	token.o \
	xact.o

EXTENSION = fence
DATA = fence--1.0.sql fence--1.0--1.1.sql
PGFILEDESC = "fence - fencing tokens for job workers"

# Every sql/*.sql is a pg_regress test and every specs/*.spec an isolation
# test, run in name order.
REGRESS = $(sort $(basename $(notdir $(wildcard sql/*.sql))))
ISOLATION = $(sort $(basename $(notdir $(wildcard specs/*.spec))))
TAP_TESTS = 1

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
