#!/usr/bin/env bash
# The checks a session with a lent GPU machine runs, grouped so that each stage fits one `run` call (10 minutes)
# and writes its results under $OUT (../shared/GPU.md: install first, then PYTHONPATH=/tmp/site:$PWD/src).
# The 2-worker test needs torchrunx's paramiko, hence cryptography: fetch the wheels with
# `bash ../shared/gpu/fetch-wheels.sh cryptography cffi pycparser`.
#
#   bash scripts/gpu_checks.sh tests   # tests/test_cuda.py: graph replay == op by op, the compiled PPO loss == the
#                                      # loss as written, no host sync, TF32, train
#   bash scripts/gpu_checks.sh bench   # Quadruped-Flat 4,096 envs (the GPU target), TF32 on/off alternating
#   bash scripts/gpu_checks.sh learn   # Quadruped-Flat 300 iterations with the defaults: does it still learn?
#   bash scripts/gpu_checks.sh humanoid-bench   # Humanoid-Flat at 4,096 envs and where throughput saturates
#   bash scripts/gpu_checks.sh humanoid-learn   # Humanoid-Flat: minutes to walking (forward and random commands);
#                                               # brings back the best checkpoint as a pretrained policy + its export
#   bash scripts/gpu_checks.sh humanoid-learn:unitree-g1   # the same for another humanoid: G1-Velocity-Flat (the
#                                               # robot must be fetched into a folder the call carries, below)
#   bash scripts/gpu_checks.sh sac-bench  # Quadruped-Flat 4,096 envs: SAC with and without the recorded step, PPO
#   bash scripts/gpu_checks.sh ppo-loss-bench  # Quadruped-Flat 4,096 envs: PPO's loss compiled and as written, twice
#   bash scripts/gpu_checks.sh recurrent-bench  # Quadruped-Flat 4,096 envs on the deployable set: GRU and MLP, twice
#   bash scripts/gpu_checks.sh sac-learn  # Quadruped-Flat: PPO, SAC and SAC with GPU-sized batches, 2.2 min each,
#                                         # side by side on the one GPU, evaluated by play (scripts/ppo_vs_sac.py)
#   bash scripts/gpu_checks.sh sac-sweep  # Quadruped-Flat: PPO and two SAC recipes at the published FastSAC scale
#                                         # (many gradient steps per env step, stabilised critics), 3 min each
#
# Stages may be chained in one call: `bash scripts/gpu_checks.sh tests bench`. Outside the device machine $OUT
# defaults to ./gpu-results.
set -u

# humanoid-learn[:ROBOT]: the task of the humanoid the stage trains (default: mjfleet's own).
humanoid_task() {
    case "${1#humanoid-learn}" in
    "" | :humanoid) echo Humanoid-Velocity-Flat ;;
    :unitree-g1) echo G1-Velocity-Flat ;;
    *) return 1 ;;
    esac
}
# Every stage name is checked before any stage runs: a typo in the last one costs no device time.
for stage in "$@"; do
    case "$stage" in
    tests | bench | learn | humanoid-bench | sac-bench | ppo-loss-bench | recurrent-bench | sac-learn | sac-sweep) ;;
    humanoid-learn*)
        if ! humanoid_task "$stage" >/dev/null; then
            echo "gpu_checks.sh: unknown robot in '$stage' (humanoid-learn, humanoid-learn:humanoid," \
                "humanoid-learn:unitree-g1)" >&2
            exit 2
        fi
        ;;
    *)
        echo "gpu_checks.sh: unknown stage '$stage' (tests, bench, learn, humanoid-bench, humanoid-learn[:robot]," \
            "sac-bench, ppo-loss-bench, recurrent-bench, sac-learn, sac-sweep)" >&2
        exit 2
        ;;
    esac
done

out=${OUT:-gpu-results}
mkdir -p "$out"
nvidia-smi -L | tee "$out/device.txt"
python3 -c "import torch, warp, mujoco_warp; print(torch.__version__, warp.__version__)" | tee -a "$out/device.txt"

status=0
for stage in "$@"; do
    case "$stage" in
    tests)
        python3 -m pytest -q -rs tests/test_cuda.py 2>&1 | tee "$out/test_cuda.txt" | tail -25
        status=$((status | PIPESTATUS[0]))
        ;;
    bench)
        for round in 1 2; do
            for precision in tf32 ieee; do
                flags=()
                [ "$precision" = ieee ] && flags=(--agent.ppo.no-tf32)
                python3 -m mjfleet.cli.bench Quadruped-Velocity-Flat --num-envs 4096 --iterations 10 "${flags[@]}" \
                    --json "$out/quadruped_flat_4096_${precision}_${round}.json" 2>&1 | tail -15
                status=$((status | PIPESTATUS[0]))
            done
        done
        ;;
    learn)
        python3 -m mjfleet.cli.train Quadruped-Velocity-Flat --max-iterations 300 --logs-root "$out/logs" \
            --log-format compact 2>&1 | tail -8
        status=$((status | PIPESTATUS[0]))
        ;;
    humanoid-bench)
        python3 -m mjfleet.cli.bench Humanoid-Velocity-Flat --num-envs 1024 4096 8192 16384 --iterations 5 \
            --json "$out/humanoid_flat_sweep.json" 2>&1 | tail -20
        status=$((status | PIPESTATUS[0]))
        ;;
    humanoid-learn*)
        # The humanoid's minutes to walking (issue 46): Humanoid-Flat at 4,096 envs, judged every 50 iterations by
        # play's evaluation at 0.5 m/s forward (error <= 0.15) and on random commands (<= 0.25), <= 5% falls each,
        # beside zero and random actions (evaluated first). At most 8 minutes of training and 8.5 in all, then
        # `play --export` of the best checkpoint: the stage fits one 10-minute `run` call. Brings back 6 files:
        #   humanoid_learn.jsonl    the curve: one line per evaluation (train_min, wall_min, iteration, env_steps,
        #                           lin_vel_error, ended_early = falls, mean_episode_length; "random": the same)
        #   pretrained/Humanoid-Velocity-Flat/{model.pt,pretrained.json,policy.onnx,policy.json,model.xml}
        #                           the best checkpoint as `play --pretrained` reads it, and its export: commit
        #                           it as src/mjfleet/pretrained/Humanoid-Velocity-Flat/ (docs/tasks.md)
        # HUMANOID_LEARN_MINUTES / HUMANOID_LEARN_WALL_MINUTES shorten it where the call must also install.
        # Set MJFLEET_COMMIT=<the commit sent> (the machine's copy has no .git) for pretrained.json. The dry run on
        # CPU (tests/test_gpu_stage.py) sets HUMANOID_DEVICE=cpu and tiny sizes in HUMANOID_LEARN_ARGS/PLAY_ARGS.
        # `humanoid-learn:unitree-g1` trains G1-Velocity-Flat alike. The device machine reaches no package index:
        # fetch the robot here into a folder the call carries (`MJFLEET_CACHE_DIR=$PWD/.gpu/cache uv run robots
        # fetch unitree-g1`, carry .gpu/cache, and set MJFLEET_CACHE_DIR=$PWD/.gpu/cache in the call). A described
        # robot's policy is not exported there: its export copies the robot's meshes (the G1's 19.7 MB,
        # docs/deploy.md), more files than a call brings back; `play --export` it here from model.pt.
        task=$(humanoid_task "$stage")
        export_flag=(--export)
        if [ "$task" != Humanoid-Velocity-Flat ]; then
            export_flag=()
            if ! python3 -m mjfleet.cli.robots show "${stage#humanoid-learn:}" >/dev/null; then
                status=$((status | 2))
                continue
            fi
        fi
        device=${HUMANOID_DEVICE:-cuda:0}
        gpu_id=None
        [[ $device == cuda:* ]] && gpu_id=${device#cuda:}
        best="$out/pretrained/$task"
        scratch=$(mktemp -d)  # play's eval.json and the full log: not under $OUT, which brings back 8 files
        # shellcheck disable=SC2086  # the extra flags are words
        python3 scripts/time_to_threshold.py "$task" --device "$device" --metric lin_vel_error --threshold 0.15 \
            --below --command 0.5 0 0 --random-threshold 0.25 --max-early-share 0.05 --eval-every 50 \
            --eval-envs 64 --episodes 64 --max-iterations 3000 --max-minutes "${HUMANOID_LEARN_MINUTES:-8}" \
            --max-wall-minutes "${HUMANOID_LEARN_WALL_MINUTES:-8.5}" --save-best "$best" ${HUMANOID_LEARN_ARGS:-} \
            2>&1 | tee "$scratch/learn.log" | grep --line-buffered '^{' | tee "$out/humanoid_learn.jsonl"
        learned=${PIPESTATUS[0]}
        [ "$learned" = 0 ] || tail -n 20 "$scratch/learn.log"
        status=$((status | learned))
        if [ -f "$best/model.pt" ]; then
            # shellcheck disable=SC2086
            python3 -m mjfleet.cli.play "$task" --checkpoint "$best/model.pt" --gpu-ids "$gpu_id" --command 0.5 0 0 \
                --episodes 64 --num-envs 64 --baselines ${export_flag[@]+"${export_flag[@]}"} \
                --output "$scratch/eval.json" ${HUMANOID_PLAY_ARGS:-} 2>&1 | tail -n 14
            played=${PIPESTATUS[0]}
            status=$((status | played))
            if [ "$played" = 0 ]; then
                if [ -d "$best/exported" ]; then
                    mv "$best/exported/policy.onnx" "$best/exported/policy.json" "$best/exported/model.xml" "$best/"
                    rm -rf "$best/exported"
                fi
                python3 -c 'import sys; from mjfleet.deploy.pretrained import record_play; record_play(*sys.argv[1:])' \
                    "$best" "$scratch/eval.json" \
                    "uv run play $task --pretrained --command 0.5 0 0 --episodes 64 --num-envs 64 --baselines"
                status=$((status | $?))
            fi
        fi
        rm -rf "$scratch"
        ;;
    sac-bench)
        for variant in capture no-capture; do
            python3 -m mjfleet.cli.bench Quadruped-Velocity-Flat --algorithm sac --num-envs 4096 --iterations 10 \
                --agent.sac.$variant-update --json "$out/quadruped_flat_4096_sac_${variant}.json" 2>&1 | tail -12
            status=$((status | PIPESTATUS[0]))
        done
        python3 -m mjfleet.cli.bench Quadruped-Velocity-Flat --num-envs 4096 --iterations 10 \
            --json "$out/quadruped_flat_4096_ppo.json" 2>&1 | tail -12
        status=$((status | PIPESTATUS[0]))
        ;;
    ppo-loss-bench)
        # The compiled PPO loss (the default since the hand-derived engine went, docs/benchmarks.md "One PPO loss")
        # against the loss as written, alternating.
        for round in 1 2; do
            for loss in compile no-compile; do
                python3 -m mjfleet.cli.bench Quadruped-Velocity-Flat --num-envs 4096 --iterations 10 \
                    --agent.ppo.$loss-update --json "$out/quadruped_flat_4096_ppo_${loss}_${round}.json" 2>&1 | tail -12
                status=$((status | PIPESTATUS[0]))
            done
        done
        ;;
    recurrent-bench)
        # A recurrent actor's env-steps/s beside the MLP's on the same observations, alternating (issue 45).
        for round in 1 2; do
            for actor in gru none; do
                python3 -m mjfleet.cli.bench Quadruped-Velocity-Flat --num-envs 4096 --iterations 10 \
                    --agent.actor.obs-groups policy --agent.actor.rnn "$actor" \
                    --json "$out/quadruped_flat_4096_rnn_${actor}_${round}.json" 2>&1 | tail -12
                status=$((status | PIPESTATUS[0]))
            done
        done
        ;;
    sac-learn)
        # Three runs at once: each has the GPU a third of the time, alike, so the comparison is at equal wall
        # clock; the absolute figures are not those of a run alone.
        logs=${TMPDIR:-/tmp}/gpu-checks-logs  # run directories: not under $OUT, which brings back 8 files
        mkdir -p "$logs"
        common=(Quadruped-Velocity-Flat --minutes 2.2 --seeds 1 --command 0.8 0 0 --gpu-ids 0 --save-every 1000)
        python3 scripts/ppo_vs_sac.py "${common[@]}" --algorithms ppo --logs-root "$logs/ppo" \
            --out "$out/learn_ppo.jsonl" >"$logs/learn_ppo.txt" 2>&1 &
        python3 scripts/ppo_vs_sac.py "${common[@]}" --algorithms sac --logs-root "$logs/sac" \
            --out "$out/learn_sac.jsonl" >"$logs/learn_sac.txt" 2>&1 &
        python3 scripts/ppo_vs_sac.py "${common[@]}" --algorithms sac --logs-root "$logs/sac_gpu" \
            --sac-flags="--agent.sac.batch-size 8192 --agent.sac.updates-per-step 2" \
            --out "$out/learn_sac_gpu.jsonl" >"$logs/learn_sac_gpu.txt" 2>&1 &
        for job in $(jobs -p); do wait "$job" || status=1; done
        tail -n 8 "$logs"/learn_*.txt "$logs"/*/*.log
        ;;
    sac-sweep)
        # What the 2-core CPU cannot afford (docs/sac.md): each transition sampled ~64 times (1,024 envs, 4
        # gradient steps of 16,384 per env step, as FastTD3's Go1 recipe samples 256), layer-normed critics,
        # weight decay, entropy target 0; once with the +-1 bounds, once with +-4 (PPO's first spread).
        logs=${TMPDIR:-/tmp}/gpu-checks-logs
        mkdir -p "$logs"
        common=(Quadruped-Velocity-Flat --minutes 3 --seeds 1 --command 0.8 0 0 --gpu-ids 0 --save-every 1000)
        recipe="--num-envs 1024 --agent.sac.batch-size 16384 --agent.sac.updates-per-step 4 --agent.sac.tau 0.1"
        recipe="$recipe --agent.sac.critic-layer-norm --agent.sac.weight-decay 0.001"
        recipe="$recipe --agent.sac.target-entropy-per-action 0 --agent.sac.log-std-max 0"
        python3 scripts/ppo_vs_sac.py "${common[@]}" --algorithms ppo --logs-root "$logs/sweep_ppo" \
            --out "$out/sweep_ppo.jsonl" >"$logs/sweep_ppo.txt" 2>&1 &
        python3 scripts/ppo_vs_sac.py "${common[@]}" --algorithms sac --logs-root "$logs/sweep_b1" \
            --sac-flags="$recipe" --out "$out/sweep_sac_bound1.jsonl" >"$logs/sweep_b1.txt" 2>&1 &
        python3 scripts/ppo_vs_sac.py "${common[@]}" --algorithms sac --logs-root "$logs/sweep_b4" \
            --sac-flags="$recipe --agent.sac.action-bound 4" --out "$out/sweep_sac_bound4.jsonl" \
            >"$logs/sweep_b4.txt" 2>&1 &
        for job in $(jobs -p); do wait "$job" || status=1; done
        tail -n 8 "$logs"/sweep_*.txt "$logs"/sweep_*/*.log
        ;;
    esac
done
exit "$status"
