"""Entry file for ``spark-submit``: the same CLI, on whatever master spark-submit chose.

    spark-submit --master spark://host:7077 --py-files build/txn_audit.zip \\
        scripts/spark_submit_entry.py ingest /data/broker-*/ --out /data/tables
"""

from auditor.cli.main import main

if __name__ == "__main__":
    main()
