# The soak's plots (bench/soak.sh runs it once per phase):
#   gnuplot -e "dir='PHASE_DIR'; png='OUT/PHASE'" bench/soak/plots.gp
# Reads the series analyze.js wrote (load.dat, rss-*.dat, hot.dat, faults.dat) and writes
# PHASE-rps.png, PHASE-p99.png, PHASE-rss.png, PHASE-hot.png. Redis faults are shaded.

set terminal pngcairo size 720,300 font ",9" noenhanced
set grid
set xrange [0:*]
set xlabel "seconds since the start of the load"
set key top left opaque box
set style fill transparent solid 0.25 noborder
faults = dir.'/faults.dat'

# Shaded fault periods: x = middle, y = ymax / 2, half widths.
shade(ymax) = sprintf("'%s' using (($1+$2)/2):(%g/2):(($2-$1)/2):(%g/2) with boxxyerror lc rgb '#ff8080' title 'Redis fault'", faults, ymax, ymax)

stats dir.'/load.dat' using 2 nooutput name 'R'
set output png.'-rps.png'
set title "answered requests per second"
set yrange [0:R_max * 1.2]
eval "plot ".shade(R_max * 1.2).", '".dir."/load.dat' using 1:2 with lines lw 1.5 lc rgb '#1060c0' title 'answers/s'"

set autoscale y
stats dir.'/load.dat' using 4 nooutput name 'P'
set output png.'-p99.png'
set title "client-side latency (ms), per interval"
set logscale y
set yrange [0.5:P_max * 2 + 1]
eval "plot ".shade(P_max * 2 + 1).", '".dir."/load.dat' using 1:($4 > 0 ? $4 : 0.5) with lines lw 1.5 lc rgb '#c03010' title 'p99', '' using 1:($3 > 0 ? $3 : 0.5) with lines lc rgb '#808080' title 'p50'"
unset logscale y

set output png.'-rss.png'
set title "resident memory per instance (MiB); a, b: on Redis; m: memory store (max_entries 1000)"
set autoscale y
stats dir.'/rss-a.dat' using 2 nooutput name 'A'
stats dir.'/rss-m.dat' using 2 nooutput name 'M'
ymax = (A_max > M_max ? A_max : M_max) * 1.3
set yrange [0:ymax]
eval "plot ".shade(ymax).", '".dir."/rss-a.dat' using 1:2 with lines lw 1.5 title 'a', '".dir."/rss-b.dat' using 1:2 with lines lw 1.5 title 'b', '".dir."/rss-m.dat' using 1:2 with lines lw 1.5 title 'm'"

# hot_plot(file, title): admitted per window against the limit (analyze.js: t sure possible limit)
do for [which in "hot memhot"] {
  file = dir.'/'.which.'.dat'
  set autoscale y  # stats obeys the y range left by the previous plot
  stats file using 3 nooutput name 'H'
  stats file using 4 nooutput name 'L'
  set output png.'-'.which.'.png'
  if (which eq "hot") {
    set title sprintf("exact hot0 on Redis (fixed window, %d per second; instances a and b, every frontend): admissions per window", L_max)
  } else {
    set title sprintf("mem hot0 on the memory store of m (fixed window, %d per second; unique-key floods shaded blue)", L_max)
  }
  ymax = (H_max > L_max ? H_max : L_max) * 1.4 + 1
  set yrange [0:ymax]
  floods = sprintf("'%s/floods.dat' using (($1+$2)/2):(%g/2):(($2-$1)/2):(%g/2) with boxxyerror lc rgb '#80a0ff' title 'flood'", dir, ymax, ymax)
  eval "plot ".shade(ymax).", ".floods.", '".file."' using 1:3 with steps lc rgb '#a0a0a0' title 'possibly in the window', '' using 1:2 with steps lw 1.5 lc rgb '#1060c0' title 'surely in the window', '' using 1:4 with lines lw 1.5 dt 2 lc rgb '#c03010' title 'limit'"
}
