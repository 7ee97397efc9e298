# shellcheck shell=bash
# Sourced by the bench scripts: the rows of BENCHMARKS.md's target tables ("| what | measured |
# reference (same run) | ratio | target | |") and the medians of repeated runs. ratio A B
# prints A / B as "1.23x";
# row WHAT MEASURED REFERENCE RATIO TARGET adds a row to the array rows, TARGET written
# "<= 1.10x" or ">= 0.95x" and the last cell saying met, missed or (an empty ratio) not
# measured, judged on RATIO's leading number ("0.89x (0.80-0.97x, 3 runs)": 0.89); print_rows
# prints the header and the rows.
#
# median N... prints the median of its arguments (the mean of the middle two for an even count);
# spread R... the median of ratios ("1.23x" each) with their range: "1.23x (1.10-1.40x, 3
# runs)".
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() {
    local m
    m=$(median "${@%x}")
    printf '%s\n' "${@%x}" | sort -g | awk -v m="$m" '{ v[NR] = $1 } END {
        if (NR == 1) printf "%.2fx", m; else printf "%.2fx (%.2f-%.2fx, %d runs)", m, v[1], v[NR], NR }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print ""; else printf "%.2fx", a / b }'; }
rows=()
row() {
    local met
    met=$(awk -v r="${4%%x*}" -v t="$5" 'BEGIN {
        split(t, w, " "); g = w[2] + 0
        if (r == "") print "not measured"; else if (w[1] == ">=") print (r >= g ? "met" : "missed");
        else print (r <= g ? "met" : "missed") }')
    rows+=("| $1 | $2 | $3 | $4 | $5 | $met |")
}
print_rows() {
    echo "| what | measured | reference (same run) | ratio | target | |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
}
