#!/bin/sh
# gpuhealth: record which Slurm job holds which GPUs, for `gpuhealth collect --hpc-job-mapping-dir DIR`
# (the files dcgm-exporter's --hpc-job-mapping-dir reads: one per GPU index, one job id a line), so the
# GPU's series carry hpc_job="<job id>". epilog-gpuhealth.sh takes the job out again.
#
#   slurm.conf:  Prolog=/etc/slurm/prolog-gpuhealth.sh
#                Epilog=/etc/slurm/epilog-gpuhealth.sh
#                PrologFlags=Alloc      # at allocation, not at the first step: salloc holds GPUs too
#
# slurmd runs it as root on each of the job's nodes with the job's SLURM_* variables and no PATH.
# SLURM_JOB_GPUS holds the node's indices of the job's GPUs (gres.conf's order; with AutoDetect=nvml
# NVML's, which is the `gpu` label the collector exports); CUDA_VISIBLE_DEVICES, set to the same in a
# prolog, is the fallback. MIG instances (dcgm-exporter's "<gpu>.<GPU instance ID>" files) are not
# written here. It never fails the job: every path ends in exit 0.
#
# The directory: GPUHEALTH_HPC_JOB_MAPPING_DIR if set (slurmd passes its own environment on only in
# part: set it in a wrapper, or change the default below), the same directory the collector reads.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
DIR=${GPUHEALTH_HPC_JOB_MAPPING_DIR:-/run/gpuhealth/hpc-jobs}
JOB=${SLURM_JOB_ID:-}
GPUS=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}

[ -n "$JOB" ] && [ -n "$GPUS" ] || exit 0   # not a GPU job
case $JOB in *[!0-9_]*) exit 0 ;; esac      # a job id, nothing else, goes into the files

umask 022
mkdir -p "$DIR" || exit 0
for gpu in $(echo "$GPUS" | tr ',' ' '); do
    case $gpu in '' | *[!0-9]*) continue ;; esac    # an index; "NoDevFiles" and UUIDs are skipped
    file="$DIR/$gpu"
    tmp="$DIR/.$gpu.$JOB.$$"                         # not a mapping file's name: never read half-written
    # One writer at a time per directory (jobs sharing a GPU start together); the file is replaced whole.
    (
        flock 9 || exit 0
        { grep -vx "$JOB" "$file" 2>/dev/null; echo "$JOB"; } >"$tmp" && mv -f "$tmp" "$file"
        rm -f "$tmp"
    ) 9>>"$DIR/.lock"
done
exit 0
