# SPDX-License-Identifier: MIT
# report.gp - the charts of make bench-report, drawn from the .dat files report.sh extracts.
# gnuplot -e "dir='DATA'; img='OUT'; banner='TEXT or empty'" report.gp
set terminal svg size 900,560 dynamic font "sans,11"
set grid
set key top right
# A busy run says so in every chart's title.
note = strlen(banner) > 0 ? "\n".banner : ""

set output img."/throughput-size.svg"
set title "Throughput vs frame size: one process to another (pm-bench ring)".note
set logscale xy
set xlabel "frame size (bytes)"
set ylabel "frames/s"
plot dir."/size-ring.dat" using 1:2 with linespoints lw 2 title "procmesh ring", \
     dir."/size-pipe.dat" using 1:2 with linespoints lw 2 title "pipe", \
     dir."/size-socketpair.dat" using 1:2 with linespoints lw 2 title "Unix socketpair"
unset logscale

set output img."/roundtrip.svg"
set title "Request/reply round trip through a broker, 64 B (pm-bench compare)".note
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set xlabel ""
set ylabel "microseconds"
# Transport names hold underscores, which enhanced text would make subscripts.
set xtics noenhanced nomirror
plot dir."/rtt.dat" using 2:xtic(1) title "p50", '' using 3 title "p90", '' using 4 title "p99", \
     '' using 5 title "p999"
unset logscale
set xtics enhanced mirror
set style data linespoints

set output img."/scale.svg"
set multiplot layout 2,2 title "Scale: N workers (pm-bench scale, fork mode, 64 B)".note
set logscale x 2
set xlabel "workers N"
set title "stream, each worker to the next"
set ylabel "frames/s"
plot dir."/scale-fps.dat" using 1:2 with linespoints lw 2 notitle
set title "hub CPU per relayed frame"
set ylabel "ns"
plot dir."/scale-cpu-stream.dat" using 1:2 with linespoints lw 2 title "stream", \
     dir."/scale-cpu-rtt.dat" using 1:2 with linespoints lw 2 title "requests"
set title "round trip, all requesting from slot 0"
set ylabel "microseconds"
set logscale y
plot dir."/scale-p50.dat" using 1:($2/1000) with linespoints lw 2 title "p50", \
     dir."/scale-p99.dat" using 1:($2/1000) with linespoints lw 2 title "p99"
set title "spawn-to-ready"
set key top left
set ylabel "ms"
plot dir."/spawn-fork.dat" using 1:2 with linespoints lw 2 title "fork mode", \
     dir."/spawn-exec.dat" using 1:2 with linespoints lw 2 title "exec mode"
unset multiplot
unset logscale

set output img."/memory.svg"
set multiplot layout 1,2 title "Memory (pm-bench scale)".note
set logscale x 2
set xlabel "workers N"
set key center right
set title "supervisor private anonymous memory"
set ylabel "KiB"
plot dir."/mem-anon-idle.dat" using 1:2 with linespoints lw 2 title "idle", \
     dir."/mem-anon-after.dat" using 1:2 with linespoints lw 2 title "after traffic", \
     dir."/mem-target.dat" using 1:2 with lines dt 2 lw 2 title "target 4 MiB + 64 KiB/worker"
set title "ring pages resident per worker"
set ylabel "KiB"
plot dir."/mem-ring-idle.dat" using 1:2 with linespoints lw 2 title "idle", \
     dir."/mem-ring-after.dat" using 1:2 with linespoints lw 2 title "after traffic"
unset multiplot
