# fence/Makefile

MODULE_big = fence
OBJS = \
	$(WIN32RES) \
	audit.o \
	audit_log.o \
	binding.o \
	citus.o \
	claims.o \
	ddl.o \
	effects.o \
	fence.o \
	follow.o \
	guard.o \
	inline.o \
	intact.o \
	protect.o \
	prune.o \
	refusal.o \
	registry.o \
	stats.o \
	token.o \
	xact.o

EXTENSION = fence
DATA = fence--1.0.sql fence--1.0--1.1.sql fence--1.1.sql
PGFILEDESC = "fence - fencing tokens for job workers"

# Every sql/*.sql is a pg_regress test and every specs/*.spec an isolation
# test, run in name order.  A scenario that runs under both forms of the
# guard has one source, specs/NAME.spec.in, from which specs/forms.awk
# makes the isolation tests NAME-before and NAME-after before `make
# installcheck` (generated, not committed, made again whenever the source
# changes; so no committed spec's name ends in -before or -after).
#
# test/run runs the suites twice: on a stock server, and on one with fence
# in shared_preload_libraries, where the guard's inline form is on
# (inline.c).  sql/preload_*.sql need fence preloaded and run only there
# (REGRESS_PRELOADED); LATE_LOAD_TESTS are about fence loaded late (its
# settings as placeholders, refusal counts without shared memory), which a
# preloaded server answers otherwise by design, and run only on the stock
# one.  Every other test runs on both and must give the same output.
ALL_REGRESS = $(sort $(basename $(notdir $(wildcard sql/*.sql))))
LATE_LOAD_TESTS = claim_api ddl_declared stats
REGRESS = $(filter-out preload_%,$(ALL_REGRESS))
REGRESS_PRELOADED = $(filter-out $(LATE_LOAD_TESTS),$(ALL_REGRESS))
FORM_SPECS = $(basename $(basename $(notdir $(wildcard specs/*.spec.in))))
ISOLATION = $(sort $(filter-out %-before %-after,$(basename $(notdir $(wildcard specs/*.spec)))) \
	$(addsuffix -before,$(FORM_SPECS)) $(addsuffix -after,$(FORM_SPECS)))
TAP_TESTS = 1
# The tests write multibyte characters: pg_regress makes their databases
# UTF8 whatever the server's default (initdb's is SQL_ASCII under LANG=C).
ENCODING = UTF8
REGRESS_PREP = $(foreach f,before after,$(patsubst %,specs/%-$(f).spec,$(FORM_SPECS)))
EXTRA_CLEAN = $(REGRESS_PREP) specs/*.spec.tmp

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

specs/%-before.spec specs/%-after.spec: specs/%.spec.in specs/forms.awk
	$(AWK) -v form=before -f specs/forms.awk $< >specs/$*-before.spec.tmp
	$(AWK) -v form=after -f specs/forms.awk $< >specs/$*-after.spec.tmp
	mv specs/$*-before.spec.tmp specs/$*-before.spec
	mv specs/$*-after.spec.tmp specs/$*-after.spec
