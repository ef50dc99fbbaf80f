# specs/forms.awk: one isolation spec of a scenario from the source that
# holds both forms of the guard.
#
#   awk -v form=before -f specs/forms.awk specs/NAME.spec.in >specs/NAME-before.spec
#   awk -v form=after  -f specs/forms.awk specs/NAME.spec.in >specs/NAME-after.spec
#
# The Makefile runs it (it builds every specs/NAME-before.spec and
# NAME-after.spec before `make installcheck`); the generated files are not
# committed.  A source is a spec whose lines are common to both forms,
# except those between
#
#   #if before          or          #if after
#   ...                             ...
#   #else                           #endif
#   ...
#   #endif
#
# which go only into that form's spec (the #else part into the other
# form's).  Blocks do not nest.  The directives are whole lines with no space
# after the "#", so a spec comment ("# if ...") is never one.  Anything else
# that looks like a directive, an unclosed block or a stray #else/#endif is
# an error: no spec is written.

function fail(msg)
{
	printf "%s:%d: %s\n", FILENAME, FNR, msg > "/dev/stderr"
	failed = 1
	exit 1
}

BEGIN {
	if (form != "before" && form != "after")
	{
		print "forms.awk: set form to before or after (-v form=...)" > "/dev/stderr"
		failed = 1
		exit 1
	}
	inblock = 0		# 0 outside a block, 1 in its first part, 2 after #else
	keep = 1
}

FNR == 1 {
	src = FILENAME
	sub(/^.*\//, "", src)
	printf "# Generated from specs/%s (the %s form) by specs/forms.awk:\n", src, form
	print "# edit that file, not this one."
	print "#"
}

/^#(if|else|endif|elif|ifdef|ifndef)([ \t]|$)/ {
	line = $0
	sub(/[ \t]+$/, "", line)
	if (line == "#if before" || line == "#if after")
	{
		if (inblock)
			fail("#if inside an #if block (blocks do not nest)")
		inblock = 1
		keep = (line == "#if " form)
	}
	else if (line == "#else")
	{
		if (inblock != 1)
			fail("#else outside an #if block")
		inblock = 2
		keep = !keep
	}
	else if (line == "#endif")
	{
		if (!inblock)
			fail("#endif outside an #if block")
		inblock = 0
		keep = 1
	}
	else
		fail("unknown directive \"" line "\" (#if before, #if after, #else, #endif)")
	next
}

keep { print }

END {
	if (!failed && inblock)
	{
		printf "%s: #if block not closed by #endif\n", FILENAME > "/dev/stderr"
		exit 1
	}
}
