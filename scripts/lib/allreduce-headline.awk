# The main benchmark's headline: terse's `none` row against OpenMPI's row, read by column name.
#   awk -f allreduce-headline.awk TERSE_OUTPUT MPI_OUTPUT
# TERSE_OUTPUT is terse-bench allreduce's table as terse-run prints it (lines prefixed "[rank] "),
# MPI_OUTPUT mpi-allreduce-bench's. Columns are found by their header names ("codec", "algo",
# "time(us)") rather than by position: the summary once read column 7 after a column was added
# in front of it and printed "terse none 0.0 ms ... speed-up infx". Prints
#   == terse none A ms (ALGO), OpenMPI B ms per call: terse speed-up Rx
# and exits 1 with a message on stderr when either table, its header or a positive time is missing.
function strip(line) {
  sub(/^\[[0-9]+\] /, "", line)  # terse-run's rank prefix
  return line
}
function header(line, cols,    n, f, i) {
  sub(/^#/, "", line)
  n = split(line, f)
  for (i = 1; i <= n; ++i) cols[f[i]] = i
}
FNR == 1 { file++ }
{
  line = strip($0)
  if (line ~ /^#/) {
    if (line ~ /time\(us\)/) {
      if (file == 1) { header(line, tcol); theader = 1 } else { header(line, mcol); mheader = 1 }
    }
    next
  }
  n = split(line, f)
  if (n < 3) next
  if (file == 1 && theader && f[tcol["codec"]] == "none" && tnone == "") {
    tnone = f[tcol["time(us)"]]
    talgo = ("algo" in tcol) ? f[tcol["algo"]] : "?"
  } else if (file == 2 && mheader && tmpi == "") {
    tmpi = f[mcol["time(us)"]]
  }
}
END {
  if (!theader || !("codec" in tcol) || !("time(us)" in tcol)) { print "allreduce-headline: no terse-bench table header (codec, time(us)) in " ARGV[1] > "/dev/stderr"; exit 1 }
  if (!mheader || !("time(us)" in mcol)) { print "allreduce-headline: no mpi-allreduce-bench table header in " ARGV[2] > "/dev/stderr"; exit 1 }
  if (tnone == "" || tnone + 0 <= 0) { print "allreduce-headline: no positive time in terse's `none` row of " ARGV[1] > "/dev/stderr"; exit 1 }
  if (tmpi == "" || tmpi + 0 <= 0) { print "allreduce-headline: no positive time in OpenMPI's row of " ARGV[2] > "/dev/stderr"; exit 1 }
  printf "== terse none %.1f ms (%s), OpenMPI %.1f ms per call: terse speed-up %.2fx\n", tnone / 1000, talgo, tmpi / 1000, tmpi / tnone
}
