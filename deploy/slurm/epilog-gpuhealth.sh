#!/bin/sh
# gpuhealth: take a finished Slurm job out of the HPC job mapping files prolog-gpuhealth.sh wrote, so
# its GPUs' series lose hpc_job="<job id>". slurm.conf: Epilog=/etc/slurm/epilog-gpuhealth.sh
#
# slurmd runs it as root on each of the job's nodes when the job ends (cancelled, failed or timed out
# too), with the job's SLURM_* variables and no PATH. It removes the job from every mapping file, not
# only from those of SLURM_JOB_GPUS: a file left behind by a lost epilog is cleaned by the next job's.
# A file left with no job is removed. It never fails: every path ends in exit 0.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
DIR=${GPUHEALTH_HPC_JOB_MAPPING_DIR:-/run/gpuhealth/hpc-jobs}
JOB=${SLURM_JOB_ID:-}

[ -n "$JOB" ] && [ -d "$DIR" ] || exit 0
(
    flock 9 || exit 0
    for file in "$DIR"/*; do
        name=${file##*/}
        case $name in '' | *[!0-9.]*) continue ;; esac   # mapping files only: "0", "1", "2.7"
        [ -f "$file" ] && grep -qx "$JOB" "$file" || continue
        tmp="$DIR/.$name.$JOB.$$"
        if grep -vx "$JOB" "$file" >"$tmp"; then
            mv -f "$tmp" "$file"     # other jobs on the GPU stay
        else
            rm -f "$file" "$tmp"     # it was the only one
        fi
    done
) 9>>"$DIR/.lock"
exit 0
