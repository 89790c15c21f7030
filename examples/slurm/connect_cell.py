# The notebook cell that puts collnb's ranks on SLURM nodes (run it in any collnb notebook,
# then every collnb.launch / run / explore / run_algorithm call runs on the engines).
# Needs: pip install "collnb[cluster]" in the notebook's Python AND on the nodes (same torch).
import ipyparallel as ipp
import collnb

cluster = ipp.Cluster(
    n=4,                              # engines = ranks; with NCCL at most the GPUs you asked for
    engine_launcher_class="slurm",    # ipyparallel submits the engines with sbatch + srun
    controller_ip="*",                # the nodes must reach the controller (messages are HMAC-signed)
    # batch_template=open("examples/slurm/ipengines.sbatch").read(),  # your site's #SBATCH lines
)
ranks = collnb.connect(cluster)       # starts the controller, submits the engines, waits for them
print(ranks)                          # rank, engine, host, pid, local_rank, interface, gpus

collnb.run("all_reduce", world_size=4)            # on the SLURM nodes
# collnb.run("all_reduce", world_size=4, backend="nccl")   # GPU nodes

# when done: collnb.disconnect(); cluster.stop_cluster_sync()   # (scancels the engines' job)
