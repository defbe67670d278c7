# stub: DeepSpeed copies its zero_to_fp32.py recovery script here
