# SPDX-License-Identifier: MIT
# fuzz.mk - builds the libFuzzer harnesses with clang and runs each for FUZZ_SECONDS.
#
# GNU make. Called by `make fuzz` (Makefile.am), which passes:
#   top_srcdir, top_builddir   the source tree and the configured build tree (config.h)
#   FUZZ_CC                    clang with libFuzzer (found by configure)
#   PM_SOURCES                 the library and daemon sources, relative to top_srcdir
#   PM_LIBS                    liburing and libsodium link flags
# and the user may set FUZZ_SECONDS (default 60), FUZZ_TARGETS (default all),
# FUZZ_FLAGS (more libFuzzer flags, e.g. -jobs=2).
#
# Everything is built under $(top_builddir)/fuzz-out/: the library sources are
# compiled again with clang, coverage and ASan+UBSan into one archive, so a
# harness links only the objects it uses; what a harness sets inside an
# opaque state (a fixed ephemeral key) is tests/hooks.h. The seed corpus in the source
# tree is read only; what libFuzzer adds goes to fuzz-out/corpus/NAME in the build
# tree, a crash to fuzz-out/artifacts/.

FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= frame ring lane hub http notify dconf address record noise crash peer output log link linkfrag cgroup
FUZZ_FLAGS ?=

B := $(top_builddir)/fuzz-out
S := $(top_srcdir)/fuzz

SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=gnu11 -g -O1 -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter \
	$(SAN) -I$(top_srcdir)/include -I$(top_srcdir)/src -I$(top_srcdir)/src/daemon \
	-I$(top_builddir)

LIB_SRCS := $(filter %.c,$(PM_SOURCES))
LIB_OBJS := $(addprefix $(B)/obj/,$(LIB_SRCS:.c=.o))

.PHONY: all build run $(addprefix run-,$(FUZZ_TARGETS))
.SUFFIXES:

all: run
build: $(addprefix $(B)/fuzz_,$(FUZZ_TARGETS))
run: $(addprefix run-,$(FUZZ_TARGETS))
	@echo "fuzz: every harness ran $(FUZZ_SECONDS) s without a finding ($(B)/summary.txt)"

$(B)/obj/%.o: $(top_srcdir)/%.c
	@mkdir -p $(@D)
	@echo "  FUZZCC   $@"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -fsanitize=fuzzer-no-link -c $< -o $@

$(B)/libpmfuzz.a: $(LIB_OBJS)
	@rm -f $@
	@echo "  AR       $@"
	@ar rcs $@ $^

$(B)/fuzz_%: $(S)/fuzz_%.c $(S)/fuzz.h $(S)/fuzz_wport.h $(top_srcdir)/tests/hooks.h $(B)/libpmfuzz.a
	@echo "  FUZZLD   $@"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -MF $@.d -Werror -fsanitize=fuzzer $< $(B)/libpmfuzz.a $(PM_LIBS) -o $@

# Every object and harness depends on the headers it includes (-MMD): a
# changed header rebuilds what uses it. Without this a struct that grew
# left objects of the old layout beside new ones, and the hub's harness
# reported a heap overflow that was only that (stop 40).
-include $(LIB_OBJS:.o=.d) $(addsuffix .d,$(addprefix $(B)/fuzz_,$(FUZZ_TARGETS)))
# One run per harness; `make fuzz` runs FUZZ_RUN_JOBS of them at once (1
# by default: the numbers in doc/reliability.md are per harness on one
# core). Each appends its line to summary.txt in one O_APPEND write.
$(addprefix run-,$(FUZZ_TARGETS)): run-%: $(B)/fuzz_%
	@sh $(S)/run.sh $* $(B) $(S) $(FUZZ_SECONDS) $(FUZZ_FLAGS)
