# shellcheck shell=bash
# Sourced by the bench scripts that print the rows of BENCHMARKS.md's target tables ("| what |
# measured | reference (same run) | ratio | target | |"): ratio A B prints A / B as "1.23x";
# row WHAT MEASURED REFERENCE RATIO TARGET adds a row to the array rows, TARGET written
# "<= 1.10x" or ">= 0.95x" and the last cell saying met, missed or (an empty ratio) not
# measured; print_rows prints the header and the rows.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print ""; else printf "%.2fx", a / b }'; }
rows=()
row() {
    local met
    met=$(awk -v r="${4%x}" -v t="$5" 'BEGIN {
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
